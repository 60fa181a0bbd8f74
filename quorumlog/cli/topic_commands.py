"""`quorumlog topic`: create, list, describe and delete topics (docs/cli.md)."""

from __future__ import annotations

import functools
import json
import time

import click

from quorumlog.cli.commands import client_option_decorators, member_options, run_with_client
from quorumlog.cli.tables import header_option, print_table
from quorumlog.client.client import Client
from quorumlog.controller.topic_config import ConfigError, changed_settings, parse_assignments
from quorumlog.log.config import TopicSettings


@click.group()
@functools.partial(client_option_decorators, required=False)
@click.pass_context
def topic(
    ctx: click.Context, brokers: str | None, timeout: float | None, secret_file: str | None
) -> None:
    """Create, list, describe or delete topics.

    \b
    Examples:
      quorumlog topic -b 127.0.0.1:7001 create events --partitions 6 --replicas 3
      quorumlog topic -b 127.0.0.1:7001 create audit --timestamps log-append
      quorumlog topic -b 127.0.0.1:7001 create users --compact
      quorumlog topic -b 127.0.0.1:7001 describe events
    """
    ctx.obj = (brokers, 10.0 if timeout is None else timeout, secret_file)


@topic.command("create")
@click.argument("name")
@click.option("--partitions", type=int, default=1, show_default=True)
@click.option("--replicas", type=int, default=None, help="Default: 3, or every node if fewer.")
@click.option("--retention-bytes", type=int, default=None, help="Per partition.")
@click.option("--retention-ms", type=int, default=None, help="Age of the records kept.")
@click.option(
    "--timestamps",
    type=click.Choice(["create", "log-append"]),
    default="create",
    show_default=True,
    help="Whose clock stamps records: the producer's, or the leader's as it appends.",
)
@click.option(
    "--compact",
    is_flag=True,
    help="Keep each key's latest record for ever (cleanup.policy=compact): every record "
    "then needs a key.",
)
@member_options
def topic_create(
    options: tuple,
    name: str,
    partitions: int,
    replicas: int | None,
    retention_bytes: int | None,
    retention_ms: int | None,
    timestamps: str,
    compact: bool,
) -> None:
    """Create a topic; returns once every partition has a leader."""

    def body(client: Client) -> None:
        client.create_topic(
            name,
            partitions,
            replicas,
            retention_bytes,
            retention_ms,
            timestamps=timestamps.replace("-", "_"),
            config={"cleanup.policy": "compact"} if compact else None,
        )
        click.echo(f"created {name}: {partitions} partition{'' if partitions == 1 else 's'}")
        warn_replicas(replicas)

    run_with_client(*options, body)


@topic.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per topic.")
@header_option
@member_options
def topic_list(options: tuple, as_json: bool, header: bool | None) -> None:
    """Print "NAME PARTITIONS REPLICAS" per topic."""

    def body(client: Client) -> None:
        topics = client.topics(details=True)
        if as_json:
            for name, (partitions, replicas) in topics.items():
                row = {"topic": name, "partitions": partitions, "replicas": replicas}
                click.echo(json.dumps(row))
            return
        rows = [(name, partitions, replicas) for name, (partitions, replicas) in topics.items()]
        print_table(("NAME", "PARTITIONS", "REPLICAS"), rows, header)

    run_with_client(*options, body)


@topic.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per partition.")
@header_option
@member_options
def topic_describe(options: tuple, name: str, as_json: bool, header: bool | None) -> None:
    """Print "PARTITION LEADER REPLICAS COMMIT_OFFSET" per partition, then the topic's
    configuration, one "NAME=VALUE" per line (--json: in each partition's "config").
    COMMIT_OFFSET is the offset of the partition's last committed record (-1: empty)."""

    def body(client: Client) -> None:
        rows = client.describe_topic(name)
        if as_json:
            for row in rows:
                click.echo(json.dumps(row))
            return
        table = [
            (
                row["partition"],
                row["leader_id"],
                ",".join(str(r) for r in row["replicas"]),
                row["commit_offset"],
            )
            for row in rows
        ]
        columns: tuple[str, ...] = ("PARTITION", "LEADER", "REPLICAS", "COMMIT_OFFSET")
        if rows and "compact" in rows[0]["cleanup_policy"]:
            cleaners = [_cleaner_columns(row.get("cleaner")) for row in rows]
            table = [(*t, *c) for t, c in zip(table, cleaners, strict=True)]
            columns += ("DIRTY", "LAST_CLEANED", "RECLAIMED_BYTES")
        if print_table(columns, table, header) and rows:
            click.echo()  # a person's table, then the settings apart from it
        if rows:
            for key, value in rows[0]["config"].items():
                click.echo(f"{key}={value}")

    run_with_client(*options, body)


def _cleaner_columns(cleaner: dict | None) -> tuple:
    """A compacted partition's cleaner, as its leader says: the share of its log written
    since the last pass, when that pass was, what it reclaimed ("-": none yet)."""
    if cleaner is None:
        return ("-", "-", "-")
    at_ms = cleaner["last_clean_ms"]
    when = "-" if at_ms is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at_ms / 1000))
    return (f"{cleaner['dirty_ratio']:.2f}", when, cleaner["bytes_reclaimed"])


@topic.command("alter")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), default=None, help="Grow to N.")
@click.option("--replicas", type=click.IntRange(min=1), default=None, help="Replicas each.")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="NAME=VALUE",
    help="A setting by Kafka's name (retention.ms, retention.bytes, segment.bytes, "
    "max.message.bytes, message.timestamp.type); NAME= goes back to the node's.",
)
@member_options
def topic_alter(
    options: tuple,
    name: str,
    partitions: int | None,
    replicas: int | None,
    assignments: tuple[str, ...],
) -> None:
    """Change a topic: its settings, then its partition count (grow only), then its
    replication factor. Returns once the change is committed and new partitions have
    leaders; replicas then move in the background (`quorumlog partition moves`).

    \b
    Examples:
      quorumlog topic -b 127.0.0.1:7001 alter events --partitions 12
      quorumlog topic -b 127.0.0.1:7001 alter events --replicas 3
      quorumlog topic -b 127.0.0.1:7001 alter events --set retention.ms=86400000
    """
    if partitions is None and replicas is None and not assignments:
        raise click.UsageError("give --partitions, --replicas or --set NAME=VALUE")
    try:
        config = parse_assignments(list(assignments))
        changed_settings(TopicSettings(), config)  # bad names and values: usage errors
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None

    def body(client: Client) -> None:
        result = client.alter_topic(
            name, partitions=partitions, replicas=replicas, config=config or None
        )
        moving = result.get("moving")
        click.echo(
            f"altered {name}: {result['partitions']} partitions, {result['replicas']} replicas"
            + (f"; {moving} partitions moving (see `quorumlog partition moves`)" if moving else "")
        )
        warn_replicas(replicas)

    run_with_client(*options, body)


def warn_replicas(replicas: int | None) -> None:
    """Two replicas look like redundancy and are none (issue 45): a partition's leader
    needs a majority of its replicas, and a majority of 2 is 2."""
    if replicas == 2:
        click.echo(
            "warning: 2 replicas survive no failure: a majority of 2 is 2, so a partition "
            "has no leader while either of its nodes is down (3 survive one)",
            err=True,
        )


@topic.command("trim")
@click.argument("name")
@click.option("--partition", type=click.IntRange(min=0), required=True)
@click.option(
    "--before",
    type=click.IntRange(min=-1),
    required=True,
    help="The new log start; -1: the committed end (everything goes).",
)
@member_options
def topic_trim(options: tuple, name: str, partition: int, before: int) -> None:
    """Delete a partition's records before an offset: its log start moves there, and a
    reader below it is told its offset is out of range (Kafka's DeleteRecords)."""

    def body(client: Client) -> None:
        start = client.trim_topic(name, partition, before)
        click.echo(f"{name}/{partition} starts at {start}")

    run_with_client(*options, body)


@topic.command("delete")
@click.argument("name")
@member_options
def topic_delete(options: tuple, name: str) -> None:
    """Delete a topic and every record in it."""

    def body(client: Client) -> None:
        client.delete_topic(name)
        click.echo(f"deleted {name}")

    run_with_client(*options, body)
