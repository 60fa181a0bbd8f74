"""`quorumlog status`: every member's role, term and offsets, as a table or JSON, and with
`--check` a health check (exit 1 when a member did not answer or a partition has no
leader)."""

from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from quorumlog.cli.commands import client_options
from quorumlog.client.client import Client


@click.command()
@client_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per member per line.")
@click.option("--watch", is_flag=True, help="Refresh a table every second (Ctrl-C to stop).")
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 if a member did not answer or a partition has no leader (a health check).",
)
def status(client: Client, as_json: bool, watch: bool, check: bool) -> None:
    """Show every member: role, term, offsets, lag.

    \b
    Examples:
      quorumlog status -b 127.0.0.1:7001 --json
      quorumlog status -b 127.0.0.1:7001 --check > /dev/null || alert
    """
    if as_json or not watch:
        statuses = client.status()
        if as_json:
            for line in statuses:
                click.echo(json.dumps(line, sort_keys=True))
        else:
            Console().print(status_table(statuses))
        if check and (problems := _health_problems(client, statuses)):
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise click.ClickException(f"not healthy: {problems[0]}{more}")
        return
    try:
        with Live(status_table(client.status()), refresh_per_second=2) as live:
            while True:
                time.sleep(1)
                live.update(status_table(client.status()))
    except KeyboardInterrupt:
        pass


def _health_problems(client: Client, statuses: list[dict]) -> list[str]:
    """What `status --check` fails on: members that did not answer, partitions without a
    leader (as the controller's leader describes them)."""
    problems = [f"node {s['node_id']} did not answer" for s in statuses if "error" in s]
    for topic in sorted(client.topics()):
        for row in client.describe_topic(topic):
            if row["leader_id"] is None:
                problems.append(f"{topic}/{row['partition']} has no leader")
    return problems


def status_table(statuses: list[dict]) -> Table:
    """Every member's role, term, leader and offsets in the Raft group of partition 0 of
    the `default` topic (as `status --json`): said in the title, since other partitions
    have leaders and offsets of their own."""
    table = Table(
        title="quorumlog cluster: partition default/0",
        caption="role, term, leader and offsets are those of partition 0 of topic default "
        "(other topics: quorumlog topic describe NAME)",
    )
    for column in ("node", "role", "term", "leader", "commit", "dirty", "flushed", "lag"):
        table.add_column(column, justify="right")
    ends = [s["dirty_offset"] for s in statuses if "dirty_offset" in s]
    end = max(ends, default=-1)
    for s in statuses:
        if "error" in s:
            table.add_row(str(s["node_id"]), s["error"], *[""] * 6)
            continue
        table.add_row(
            str(s["node_id"]),
            s["role"],
            str(s["term"]),
            str(s["leader_id"] if s["leader_id"] is not None else "-"),
            str(s["commit_offset"]),
            str(s["dirty_offset"]),
            str(s["flushed_offset"]),
            str(end - s["commit_offset"]),
        )
    return table
