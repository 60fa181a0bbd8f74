"""`quorumlog group`: list, describe and reset consumer groups; and `consume --group`, a
member of one (docs/cli.md)."""

from __future__ import annotations

import functools
import json
import sys

import click

from quorumlog.cli.commands import (
    client_option_decorators,
    member_options,
    run_with_client,
    tls_options,
)
from quorumlog.cli.tables import header_option, print_table
from quorumlog.cli.times import TIME
from quorumlog.client.client import Client
from quorumlog.client.consumer import Consumer

GROUP_POLL_RECORDS = 1000
GROUP_POLL_S = 1.0  # without --follow, a poll this long that finds nothing ends the run


@click.group()
@functools.partial(client_option_decorators, required=False)
@click.pass_context
def group(
    ctx: click.Context, brokers: str | None, timeout: float | None, secret_file: str | None
) -> None:
    """List, describe or reset consumer groups.

    \b
    Examples:
      quorumlog group -b 127.0.0.1:7001 list
      quorumlog group -b 127.0.0.1:7001 describe billing
      quorumlog group -b 127.0.0.1:7001 reset-offsets billing --topic events --to earliest
    """
    ctx.obj = (brokers, 10.0 if timeout is None else timeout, secret_file)


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per group.")
@header_option
@member_options
def group_list(options: tuple, as_json: bool, header: bool | None) -> None:
    """Print "GROUP MODE MEMBERS" per group."""

    def body(client: Client) -> None:
        groups = client.groups()
        if as_json:
            for row in groups:
                click.echo(json.dumps(row))
            return
        rows = [(g["group"], g["mode"], g["members"]) for g in groups]
        print_table(("GROUP", "MODE", "MEMBERS"), rows, header)

    run_with_client(*options, body)


@group.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per partition.")
@header_option
@member_options
def group_describe(options: tuple, name: str, as_json: bool, header: bool | None) -> None:
    """Print "TOPIC PARTITION COMMITTED END LAG OWNER" per partition ("-": none).

    END is the offset of the partition's last record (as `topic describe` shows it);
    COMMITTED is the next offset the group reads (Kafka's position), so a group that read
    everything shows COMMITTED = END + 1 and LAG 0. --json adds "next_offset", the offset
    the partition's next record will take (Kafka's end offset).
    """

    def body(client: Client) -> None:
        rows = client.describe_group(name)["partitions"]
        if as_json:
            for row in rows:
                click.echo(json.dumps({"group": name, **row}))
            return
        print_table(COLUMNS, [[row[k] for k in _COLUMN_KEYS] for row in rows], header)

    run_with_client(*options, body)


COLUMNS = ("TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "OWNER")
_COLUMN_KEYS = ("topic", "partition", "committed", "end", "lag", "owner")


@group.command("reset-offsets")
@click.argument("name")
@click.option("--topic", required=True)
@click.option("--to", "to", default=None, help="earliest, latest or an offset.")
@click.option(
    "--to-time",
    type=TIME,
    default=None,
    help="Each partition's first record stamped at or after it (2026-11-28T09:00:00Z, -2h).",
)
@member_options
def group_reset_offsets(
    options: tuple, name: str, topic: str, to: str | None, to_time: int | None
) -> None:
    """Set the group's positions in every partition of a topic (refused while the group
    has active members)."""
    if (to is None) == (to_time is None):
        raise click.UsageError("give --to or --to-time")
    target: str | int | None = to
    if to is not None and to not in ("earliest", "latest"):
        try:
            target = int(to)
        except ValueError:
            raise click.UsageError(
                f"--to takes earliest, latest or an offset, not {to!r}"
            ) from None

    def body(client: Client) -> None:
        for t, partition, offset in client.reset_offsets(name, topic, target, to_time_ms=to_time):
            click.echo(f"{t} {partition} {offset}")

    run_with_client(*options, body)


@group.command("delete")
@click.argument("name")
@member_options
def group_delete(options: tuple, name: str) -> None:
    """Delete a group and its positions (refused while the group has active members)."""

    def body(client: Client) -> None:
        client.delete_group(name)
        click.echo(f"deleted group {name}")

    run_with_client(*options, body)


def consume_in_group(
    client: Client,
    group_name: str,
    mode: str,
    start: str,
    max_records: int | None,
    follow: bool,
    with_offsets: bool,
    topic: str,
) -> None:
    """`consume --group`: print what this member is given, committing (stream) or acking
    (queue) after each batch it printed, so a member stopped by Ctrl-C leaves at most one
    batch to the others."""
    if start not in ("earliest", "latest"):
        raise click.UsageError(
            "with --group, --from is earliest or latest (where nothing is committed)"
        )
    out = sys.stdout.buffer
    printed = 0
    consumer = Consumer(
        client.brokers,
        group_name,
        [topic],
        start=start,
        mode=mode,
        secret=client.secret,
        timeout=client.timeout,
        **tls_options(),
    )
    with consumer:
        try:
            while max_records is None or printed < max_records:
                want = (
                    GROUP_POLL_RECORDS
                    if max_records is None
                    else min(GROUP_POLL_RECORDS, max_records - printed)
                )
                records = consumer.poll(want, GROUP_POLL_S)
                for r in records:
                    out.write(
                        b"%d\t%s\n" % (r.offset, r.value or b"")
                        if with_offsets
                        else (r.value or b"") + b"\n"
                    )
                out.flush()
                if mode == "queue":
                    for r in records:
                        consumer.ack(r)
                consumer.commit()  # an empty poll too: it may have read past control batches
                printed += len(records)
                if not records and not follow:
                    break
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:
            sys.stderr.close()  # the reader went away (| head): not an error
