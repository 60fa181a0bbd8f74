"""`quorumlog cluster`: operations on the whole cluster (rebalancing replicas and leaders)."""

from __future__ import annotations

import functools
import json
import sys
import time

import click

from quorumlog.cli.commands import (
    EXIT_OPERATIONAL,
    client_option_decorators,
    member_options,
    run_with_client,
)
from quorumlog.client.client import Client

WAIT_POLL_S = 0.5


@click.group()
@functools.partial(client_option_decorators, required=False)
@click.pass_context
def cluster(
    ctx: click.Context, brokers: str | None, timeout: float | None, secret_file: str | None
) -> None:
    """Operations on the whole cluster.

    \b
    Examples:
      quorumlog cluster -b 127.0.0.1:7001 rebalance
      quorumlog cluster -b 127.0.0.1:7001 rebalance --wait --timeout 600
    """
    ctx.obj = (brokers, 10.0 if timeout is None else timeout, secret_file)


@cluster.command("rebalance")
@click.option("--wait", is_flag=True, help="Return once balanced (exit 1 after --timeout).")
@click.option("--json", "as_json", is_flag=True, help="What it will change, one JSON line.")
@member_options
def cluster_rebalance(options: tuple, wait: bool, as_json: bool) -> None:
    """Spread replicas, then leaders, over all nodes: every node ends within one replica
    (and one preferred leadership) of the average. The controller moves at most
    `rebalance_moves_max` replicas at a time ([raft] setting, default 2); a node that joins
    starts this by itself. Prints what it will change: "move TOPIC PARTITION FROM -> TO"
    (a replica to another node) and "lead TOPIC PARTITION FROM -> TO" (the preferred
    leader first)."""
    timeout = options[1]

    def body(client: Client) -> None:
        started = time.monotonic()
        result = client.rebalance()
        if as_json:
            click.echo(json.dumps(result, sort_keys=True))
        else:
            _print_plan(result)
        if not wait:
            return
        while result["state"] != "balanced":
            if time.monotonic() - started > timeout:
                click.echo(
                    f"quorumlog: not balanced after {timeout:g} s: {result['state']}, about "
                    f"{result['moves_left']} changes left"
                    + (f" ({result['waiting']})" if result.get("waiting") else ""),
                    err=True,
                )
                sys.exit(EXIT_OPERATIONAL)
            time.sleep(WAIT_POLL_S)
            result = client.rebalance(start=False)
        if not as_json:
            click.echo(f"balanced: {_counts(result)}")

    run_with_client(*options, body)


def _print_plan(result: dict) -> None:
    if result["state"] == "balanced":
        click.echo(f"balanced already: {_counts(result)}")
        return
    moves = leads = 0
    for row in result.get("plan", []):
        replica_move = set(row["from"]) != set(row["to"])
        moves += replica_move
        leads += not replica_move
        click.echo(
            f"{'move' if replica_move else 'lead'} {row['topic']} {row['partition']} "
            f"{','.join(map(str, row['from']))} -> {','.join(map(str, row['to']))}"
        )
    click.echo(f"rebalancing: {moves} replica moves, {leads} leader changes")


def _counts(result: dict) -> str:
    """Each node's replicas and preferred leaderships, on one line."""
    return "; ".join(
        f"node {n}: {count} replicas, {result['leaders'].get(n, 0)} leading"
        for n, count in result["replicas"].items()
    )
