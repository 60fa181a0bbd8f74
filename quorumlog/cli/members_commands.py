"""`quorumlog members` and `transfer-leader`: the cluster's membership, changed one committed
step at a time by the leader (retried while another change or a transfer is under way)."""

from __future__ import annotations

import functools
import json

import click

from quorumlog.cli.commands import (
    client_option_decorators,
    client_options,
    member_options,
    run_with_client,
)
from quorumlog.cli.tables import header_option, print_table
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError


@click.group()
@functools.partial(client_option_decorators, required=False)
@click.pass_context
def members(
    ctx: click.Context, brokers: str | None, timeout: float | None, secret_file: str | None
) -> None:
    """List or change the members of the cluster.

    \b
    Examples:
      quorumlog members -b 127.0.0.1:7001 list
      quorumlog members -b 127.0.0.1:7001 add 4 127.0.0.1:7004 --wait
      quorumlog members -b 127.0.0.1:7001 add 5 127.0.0.1:7005 --witness
      quorumlog members -b 127.0.0.1:7001 demote 1
    """
    ctx.obj = (brokers, 10.0 if timeout is None else timeout, secret_file)


@members.command("list")
@member_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per member.")
@header_option
def members_list(options: tuple, as_json: bool, header: bool | None) -> None:
    """Print "ID HOST:PORT voter|learner" per member."""
    run_with_client(*options, lambda client: _print_members(client, as_json, header))


def _print_members(client: Client, as_json: bool, header: bool | None) -> None:
    # Removed nodes still running answer too, with the configuration they last knew.
    statuses = [s for s in client.status() if "config" in s and s["role"] != "removed"]
    if not statuses:
        raise QuorumLogError("no member answered")
    leader = next((s for s in statuses if s["role"] == "leader"), statuses[0])
    config = leader["config"]
    rows = []
    for node_id, address in sorted((int(k), v) for k, v in leader["members"].items()):
        kind = "learner" if node_id in config["learners"] else "voter"
        if as_json:
            click.echo(json.dumps({"node_id": node_id, "address": address, "role": kind}))
        rows.append((node_id, address, kind))
    if not as_json:
        print_table(("ID", "HOST:PORT", "ROLE"), rows, header)


def _change(options: tuple, op: str, **args) -> None:
    def body(client: Client) -> None:
        result = client.admin(op, **args)
        config = result.get("config")
        if config is not None:
            roles = [f"voters {config['voters']}", f"learners {config['learners']}"]
            roles += [f"{k} {config[k]}" for k in ("witnesses", "log_only") if config.get(k)]
            click.echo(" ".join(roles))

    run_with_client(*options, body)


@members.command("add")
@click.argument("node_id", type=click.IntRange(min=1))
@click.argument("address")
@click.option("--wait", is_flag=True, help="Return once the learner is promoted to voter.")
@click.option("--witness", is_flag=True, help="A voter that never leads (it votes and logs).")
@member_options
def members_add(options: tuple, node_id: int, address: str, wait: bool, witness: bool) -> None:
    """Add a node (started with `serve --join`) as a learner; the leader promotes it to
    voter once it has caught up. A log-only member added again is promoted again."""
    _change(options, "add_member", node_id=node_id, address=address, wait=wait, witness=witness)


@members.command("demote")
@click.argument("node_id", type=click.IntRange(min=1))
@member_options
def members_demote(options: tuple, node_id: int) -> None:
    """Make a voter log-only: it keeps the log but no longer votes, so the majority
    shrinks (for a voter that died and may come back)."""
    _change(options, "demote_member", node_id=node_id)


@members.command("promote")
@click.argument("node_id", type=click.IntRange(min=1))
@member_options
def members_promote(options: tuple, node_id: int) -> None:
    """Make a witness or a log-only member a full voter (once it has caught up)."""
    _change(options, "promote_member", node_id=node_id)


@members.command("remove")
@click.argument("node_id", type=click.IntRange(min=1))
@member_options
def members_remove(options: tuple, node_id: int) -> None:
    """Remove a voter or a learner (the leader hands its leadership over first)."""
    _change(options, "remove_member", node_id=node_id)


@members.command("replace")
@click.argument("old_id", type=click.IntRange(min=1))
@click.argument("new_id", type=click.IntRange(min=1))
@click.argument("address")
@member_options
def members_replace(options: tuple, old_id: int, new_id: int, address: str) -> None:
    """Replace a voter by a new node with joint consensus (the new node catches up as a
    learner first)."""
    _change(options, "replace_member", old_id=old_id, new_id=new_id, address=address)


@members.command("set")
@click.argument("members_list", metavar="ID=HOST:PORT,...")
@member_options
def members_set(options: tuple, members_list: str) -> None:
    """Make exactly these nodes the voters, with joint consensus."""
    members_arg = {}
    for item in members_list.split(","):
        node_id, sep, address = item.strip().partition("=")
        if not sep or not node_id.isdigit():
            raise click.UsageError(f"members set wants ID=HOST:PORT items, not {item!r}")
        members_arg[node_id] = address
    _change(options, "set_members", members=members_arg)


@click.command("transfer-leader")
@client_options
@click.argument("node_id", type=click.IntRange(min=1))
def transfer_leader(client: Client, node_id: int) -> None:
    """Move the leadership to a voter; returns once it leads.

    \b
    Example:
      quorumlog transfer-leader -b 127.0.0.1:7001 2
    """
    client.admin("transfer_leader", node_id=node_id)
    click.echo(f"node {node_id} leads")
