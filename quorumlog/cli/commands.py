"""The client commands of the CLI: produce and consume, and the options every command
shares (status: status_command.py; members: members_commands.py).

Every expected failure is one line on stderr and exit 1 (operational) or 2 (usage); never a
traceback (docs/cli.md).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import BinaryIO

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

from quorumlog.cli.partition_reading import (
    ALL_PARTITIONS,
    PartitionChoice,
    note_other_partitions,
    parse_start,
    partition_count,
    read_batches,
    say_if_past_the_end,
    start_offsets,
)
from quorumlog.cli.record_format import (
    FormatError,
    json_records,
    line_record,
    parse_header,
    records_writer,
)
from quorumlog.cli.times import TIME
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError, UnknownTopicError
from quorumlog.client.partitioner import partition_of_key
from quorumlog.client.protocol import DEFAULT_TOPIC, Record, parse_brokers, read_secret_file
from quorumlog.transport.tls import TlsSetupError

EXIT_OPERATIONAL = 1
PRODUCE_CHUNK_RECORDS = 10_000
PROGRESS_RECORDS_MIN = 10_000
PROGRESS_BYTES_MIN = 1 << 20
stderr = Console(stderr=True)


def read_secret(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        return read_secret_file(path)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _remember_tls(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # Kept in the context's meta, which a group and its subcommand share, so that the TLS
    # files given at either level reach the client (`tls_options`).
    if value is not None:
        ctx.meta[f"quorumlog.{param.name}"] = value


def tls_options() -> dict[str, str | None]:
    """The --tls-ca/--tls-cert/--tls-key of the command running, as client arguments."""
    meta = click.get_current_context().meta
    return {k: meta.get(f"quorumlog.{k}") for k in ("tls_ca", "tls_cert", "tls_key")}


MISSING_BROKERS = "give the brokers with -b/--brokers or QUORUMLOG_BROKERS"


def check_brokers(
    ctx: click.Context, param: click.Parameter, brokers: str | None, required: bool = False
) -> str | None:
    """A bad broker list is bad usage (exit 2, naming -b), found before any connection; so
    is none where the command needs one (`required`; a group's -b is not: its subcommand
    may name them, and says MISSING_BROKERS too when neither did)."""
    if brokers is None and required:
        raise click.UsageError(MISSING_BROKERS)
    if brokers is not None:
        try:
            parse_brokers(brokers)
        except (ValueError, QuorumLogError) as exc:
            raise click.BadParameter(str(exc)) from None
    return brokers


def client_option_decorators(command: Callable, required: bool = True) -> Callable:
    """-b/--brokers, --timeout, --secret-file (docs/cli.md) and the TLS files."""
    tls = [
        click.option(
            f"--{name.replace('_', '-')}",
            name,
            envvar=f"QUORUMLOG_{name.upper()}",
            expose_value=False,
            callback=_remember_tls,
            help=text,
        )
        for name, text in (
            ("tls_ca", "PEM CA to check the nodes against: TLS (nodes started with --tls-ca)."),
            ("tls_cert", "PEM certificate of this client, signed by that CA."),
            ("tls_key", "Its private key."),
        )
    ]
    for option in reversed(
        (
            *tls,
            click.option(
                "-b",
                "--brokers",
                envvar="QUORUMLOG_BROKERS",
                show_envvar=True,
                callback=functools.partial(check_brokers, required=required),
                help="HOST:PORT,... of any nodes (needed: here or from the environment).",
            ),
            click.option(
                "--timeout",
                type=click.FloatRange(min=0.1),
                default=10.0 if required else None,
                help="Seconds per call (default 10).",
            ),
            click.option(
                "--secret-file",
                envvar="QUORUMLOG_SECRET_FILE",
                default=None,
                help="File holding the cluster secret.",
            ),
        )
    ):
        command = option(command)
    return command


def member_options(command: Callable) -> Callable:
    """The client options again after `members ... SUBCOMMAND`, overriding the group's."""

    @functools.partial(client_option_decorators, required=False)
    @click.pass_obj
    @functools.wraps(command)
    def wrapper(
        group: tuple, brokers: str | None, timeout: float | None, secret_file: str | None, **kwargs
    ):
        options = (
            brokers or group[0],
            timeout if timeout is not None else group[1],
            secret_file or group[2],
        )
        if options[0] is None:
            raise click.UsageError(MISSING_BROKERS)
        return command(options, **kwargs)

    return wrapper


def run_with_client(
    brokers: str, timeout: float, secret_file: str | None, body: Callable[[Client], None]
) -> None:
    """Run `body` with a client; an expected failure is one line on stderr and exit 1."""
    try:
        secret = read_secret(secret_file)
        with Client(brokers, secret=secret, timeout=timeout, **tls_options()) as client:
            body(client)
    except TlsSetupError as exc:
        raise click.UsageError(str(exc)) from None
    except QuorumLogError as exc:
        click.echo(f"quorumlog: {exc}", err=True)
        sys.exit(EXIT_OPERATIONAL)


def client_options(command: Callable) -> Callable:
    """Adds the client options and hands the command a connected `client`."""

    @client_option_decorators
    @functools.wraps(command)
    def wrapper(brokers: str, timeout: float, secret_file: str | None, **kwargs):
        run_with_client(brokers, timeout, secret_file, lambda client: command(client, **kwargs))

    return wrapper


def topic_options(command: Callable) -> Callable:
    """--topic and --partition of `produce` (docs/cli.md); `consume` has its
    own --partition, which also takes `all`."""
    command = click.option(
        "--partition",
        type=click.IntRange(min=0),
        default=None,
        help="Default: by key (round robin if unkeyed).",
    )(command)
    return click.option("--topic", default=DEFAULT_TOPIC, show_default=True)(command)


@click.command()
@client_options
@click.option(
    "--acks",
    type=click.Choice(["quorum", "all", "leader", "none"]),
    default="quorum",
    show_default=True,
    help="all: quorum, as Kafka's tools say it.",
)
@topic_options
@click.option("--key-separator", default=None, help="Split each line into KEY SEP VALUE.")
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="A header on every record (repeatable).",
)
@click.option(
    "--format",
    "input_format",
    type=click.Choice(["lines", "json"]),
    default="lines",
    show_default=True,
    help="lines: one value (or KEY SEP VALUE) a line; json: one object a line, as "
    "`consume --format json` prints: key, value, headers, partition, timestamp.",
)
@click.argument("source", type=click.File("rb"), default="-")
def produce(
    client: Client,
    acks: str,
    topic: str,
    partition: int | None,
    key_separator: str | None,
    headers: tuple[str, ...],
    input_format: str,
    source: BinaryIO,
) -> None:
    """Append one record per input line; print "FIRST_OFFSET LAST_OFFSET" (with records
    in several partitions, "PARTITION FIRST_OFFSET LAST_OFFSET" per partition).

    With --format json each line is an object such as
    {"key": "alice", "value": "1", "headers": [{"key": "source", "value": "web"}]}:
    bytes are a string when UTF-8, else {"base64": "..."}; "partition" and "timestamp"
    (ms) are optional and kept ("topic" and "offset" are ignored), --partition overrides
    the lines' partitions.

    \b
    Examples:
      seq 1000 | quorumlog produce -b 127.0.0.1:7001
      quorumlog produce -b 127.0.0.1:7001 --acks leader events.txt
      quorumlog produce -b 127.0.0.1:7001 --topic events --key-separator : orders.txt
      quorumlog produce -b 127.0.0.1:7001 --topic events -H source=web -H trace=7f3a orders.txt
      quorumlog consume -b 127.0.0.1:7001 --topic events --partition all --format json \\
        | quorumlog produce -b 127.0.0.1:7001 --topic events-copy --format json
    """
    if input_format == "json" and key_separator is not None:
        raise click.UsageError("--key-separator reads lines of text: not with --format json")
    try:
        extra = [parse_header(h) for h in headers]
    except FormatError as exc:
        raise click.BadParameter(str(exc), param_hint="-H/--header") from None
    separator = key_separator.encode() if key_separator else None
    spans: dict[int, list[int]] = {}  # partition -> [first, last] offsets appended
    count = lines = 0
    columns = (TextColumn("producing"), BarColumn(), TransferSpeedColumn())
    with _progress(_file_bytes(source), PROGRESS_BYTES_MIN, *columns) as advance:
        for chunk in _line_chunks(source):
            if input_format == "json":
                try:
                    records, asked = json_records(chunk, lines, extra)
                except FormatError as exc:
                    raise click.UsageError(f"input {exc}") from None
            else:
                records, asked = [line_record(line, separator, extra) for line in chunk], None
            lines += len(chunk)
            if not records:
                continue
            for target, part in _by_partition(client, topic, partition, records, asked):
                result = client.append(
                    part,
                    acks=KAFKA_ACKS.get(acks, acks),
                    details=True,
                    topic=topic,
                    partition=target,
                )
                if result is not None:
                    span = spans.setdefault(result.partition, [result.first_offset, 0])
                    span[1] = result.last_offset
            count += len(records)
            advance(sum(len(v) + 1 for v in chunk))
    if count == 0:
        raise QuorumLogError("nothing to append: the input is empty")
    if not spans:
        click.echo(f"{count} records sent with acks=none: offsets are not reported", err=True)
        return
    if len(spans) == 1:
        ((first, last),) = spans.values()
        click.echo(f"{first} {last}")
        return
    for target, (first, last) in sorted(spans.items()):
        click.echo(f"{target} {first} {last}")


def _by_partition(
    client: Client,
    topic: str,
    partition: int | None,
    records: list[Record],
    asked: list[int | None] | None = None,
) -> list[tuple[int | None, list[Record]]]:
    """One append per partition: a record to the partition its line asked for (`asked`),
    else a keyed record to its key's partition; --partition overrides both."""
    if asked is None:
        asked = [None] * len(records)
    if partition is not None or all(
        r.key is None and p is None for r, p in zip(records, asked, strict=True)
    ):
        return [(partition, records)]
    count = None
    groups: dict[int | None, list[Record]] = {}
    for r, target in zip(records, asked, strict=True):
        if target is None and r.key is not None:
            if count is None:
                count = client.topics().get(topic)
                if count is None:
                    raise UnknownTopicError(f"unknown topic {topic!r}")
            target = partition_of_key(r.key, count)
        groups.setdefault(target, []).append(r)
    return list(groups.items())


def _line_chunks(source: BinaryIO) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for line in source:
        chunk.append(line.rstrip(b"\r\n"))
        if len(chunk) >= PRODUCE_CHUNK_RECORDS:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _file_bytes(source: BinaryIO) -> int:
    try:
        return os.fstat(source.fileno()).st_size
    except (OSError, ValueError):
        return 0  # a pipe: no progress to show


@contextlib.contextmanager
def _progress(total: int | None, minimum: int, *columns) -> Iterator[Callable[[int], None]]:
    """A bar on stderr for long work (at least `minimum`); nothing when stderr is not a
    terminal. Yields the function that advances it."""
    if not stderr.is_terminal or total is None or total < minimum:
        yield lambda n: None
        return
    with Progress(*columns, console=stderr, transient=True) as progress:
        task = progress.add_task("", total=total)
        yield lambda n: progress.advance(task, n)


@click.command()
@client_options
@click.option(
    "--from",
    "start",
    default="earliest",
    show_default=True,
    help="earliest, latest or an offset (with --partition all: that offset in each partition).",
)
@click.option(
    "--from-time",
    type=TIME,
    default=None,
    help="From the first record stamped at or after this time: 2026-11-28T09:00:00Z, -10m.",
)
@click.option(
    "--max", "max_records", type=click.IntRange(min=0), default=None, help="Stop after N records."
)
@click.option("--follow", is_flag=True, help="Keep waiting for new records (Ctrl-C to stop).")
@click.option("--with-offsets", is_flag=True, help='Print "OFFSET<TAB>VALUE".')
@click.option("--topic", default=DEFAULT_TOPIC, show_default=True)
@click.option(
    "--partition",
    type=PartitionChoice(),
    default=None,
    metavar="P|all",
    help="A partition, or all of them: all. Default: 0 (a note on stderr if there are more).",
)
@click.option(
    "--format",
    "output_format",
    default=None,
    metavar="json|TEMPLATE",
    help="json: one object a line (topic, partition, offset, timestamp, key, value, headers; "
    'bytes that are not UTF-8 as {"base64": "..."}). TEMPLATE: kcat\'s %t %p %o %k %v %h %T '
    "%% and \\n \\t, or {topic} {partition} {offset} {key} {value} {headers} {timestamp}; "
    "a newline ends each record unless the template ends with one.",
)
@click.option("--group", "group_name", default=None, help="Consume as a member of this group.")
@click.option(
    "--mode",
    type=click.Choice(["stream", "queue"]),
    default="stream",
    show_default=True,
    help="With --group: a partition per member (stream) or shared records (queue).",
)
def consume(
    client: Client,
    start: str,
    from_time: int | None,
    max_records: int | None,
    follow: bool,
    with_offsets: bool,
    topic: str,
    partition: int | str | None,
    output_format: str | None,
    group_name: str | None,
    mode: str,
) -> None:
    """Print committed records, one value per line.

    Without --partition only partition 0 is read (a note on stderr says so when the topic
    has more); --partition all reads every partition, each in offset order, merged as they
    arrive. Headers print as NAME=VALUE,NAME=VALUE (%h).

    \b
    Examples:
      quorumlog consume -b 127.0.0.1:7001 --from earliest --max 10
      quorumlog consume -b 127.0.0.1:7001 --from latest --follow --with-offsets
      quorumlog consume -b 127.0.0.1:7001 --from-time -10m --max 100
      quorumlog consume -b 127.0.0.1:7001 --topic events --partition all --follow
      quorumlog consume -b 127.0.0.1:7001 --topic events --partition all --format '%p %o %k=%v %h'
      quorumlog consume -b 127.0.0.1:7001 --topic events --format '{offset} {timestamp} {value}'
      quorumlog consume -b 127.0.0.1:7001 --topic events --partition all --format json
      quorumlog consume -b 127.0.0.1:7001 --topic events --group billing --follow
    """
    ctx = click.get_current_context()
    if from_time is not None:
        if ctx.get_parameter_source("start") is not ParameterSource.DEFAULT:
            raise click.UsageError("--from and --from-time: give one")
        if group_name is not None:
            raise click.UsageError(
                "a group member starts where its group is: move it with "
                "`group reset-offsets --to-time`, not --from-time"
            )
    if output_format is not None and with_offsets:
        raise click.UsageError("--format and --with-offsets: give one (--format '%o\\t%v')")
    try:
        write = records_writer(output_format, with_offsets)
    except FormatError as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None
    if group_name is not None:
        if partition is not None:
            raise click.UsageError("a group member is given its partitions: drop --partition")
        if output_format is not None:
            raise click.UsageError("--format is not available with --group yet")
        from quorumlog.cli.group_commands import consume_in_group  # it builds on this module

        consume_in_group(client, group_name, mode, start, max_records, follow, with_offsets, topic)
        return
    first = parse_start(start)
    if partition == ALL_PARTITIONS:
        partitions = list(range(partition_count(client, topic)))
    else:
        if partition is None:
            note_other_partitions(client, topic)
        partitions = [partition or 0]
    positions = start_offsets(client, topic, partitions, first, from_time)
    out = sys.stdout.buffer
    printed = 0
    try:
        columns = (TextColumn("consuming"), BarColumn(), TextColumn("{task.completed:,} records"))
        with _progress(max_records, PROGRESS_RECORDS_MIN, *columns) as advance:
            first_positions = dict(positions)
            for records in read_batches(client, topic, positions, max_records, follow):
                out.write(write(records))
                out.flush()
                printed += len(records)
                advance(len(records))
            if printed == 0 and not follow:
                say_if_past_the_end(client, topic, first_positions)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (| head): not an error


KAFKA_ACKS = {"all": "quorum"}
