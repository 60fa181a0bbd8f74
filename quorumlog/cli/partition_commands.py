"""`quorumlog partition`: move a partition's replicas, and see the moves under way."""

from __future__ import annotations

import functools
import json

import click

from quorumlog.cli.commands import client_option_decorators, member_options, run_with_client
from quorumlog.client.client import Client


@click.group()
@functools.partial(client_option_decorators, required=False)
@click.pass_context
def partition(
    ctx: click.Context, brokers: str | None, timeout: float | None, secret_file: str | None
) -> None:
    """Move a partition's replicas to other nodes, or list the moves under way.

    \b
    Examples:
      quorumlog partition -b 127.0.0.1:7001 move events 3 --to 1,2,4
      quorumlog partition -b 127.0.0.1:7001 moves
    """
    ctx.obj = (brokers, 10.0 if timeout is None else timeout, secret_file)


def node_ids(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        ids = [int(n) for n in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"a comma-separated list of node ids, not {value!r}") from None
    if any(n < 1 for n in ids):
        raise click.BadParameter(f"node ids are positive, not {value!r}")
    return ids


@partition.command("move")
@click.argument("topic")
@click.argument("partition_index", metavar="PARTITION", type=click.IntRange(min=0))
@click.option(
    "--to",
    required=True,
    callback=node_ids,
    metavar="ID,ID,...",
    help="The replicas it ends with, its preferred leader first.",
)
@member_options
def partition_move(options: tuple, topic: str, partition_index: int, to: list[int]) -> None:
    """Give a partition exactly the replicas --to. New replicas join as learners, catch up,
    then the group changes its voters by joint consensus; a leader that leaves hands its
    leadership over first. Returns once the new set is committed; `moves` tells the rest."""

    def body(client: Client) -> None:
        client.move_partition(topic, partition_index, to)
        click.echo(f"moving {topic}/{partition_index} to {','.join(map(str, to))}")

    run_with_client(*options, body)


@partition.command("moves")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per move.")
@member_options
def partition_moves(options: tuple, as_json: bool) -> None:
    """Print the moves under way: "TOPIC PARTITION FROM TO COPIED/TOTAL PROGRESS"."""

    def body(client: Client) -> None:
        for move in client.partition_moves():
            if as_json:
                click.echo(json.dumps(move))
                continue
            copied = min(move["bytes_copied"].values(), default=move["bytes_total"])
            click.echo(
                f"{move['topic']} {move['partition']} "
                f"{','.join(map(str, move['from']))} {','.join(map(str, move['to']))} "
                f"{copied}/{move['bytes_total']} {move['progress']:.0%}"
            )

    run_with_client(*options, body)
