"""The client commands of the CLI: produce and consume, and the options every command
shares (status: status_command.py; members: members_commands.py).

Every expected failure is one line on stderr and exit 1 (operational) or 2 (usage); never a
traceback (the README's command line).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

from quorumlog.cli.times import TIME
from quorumlog.client.client import Client
from quorumlog.client.errors import OffsetOutOfRangeError, QuorumLogError, UnknownTopicError
from quorumlog.client.partitioner import partition_of_key
from quorumlog.client.protocol import DEFAULT_TOPIC, Record, parse_brokers, read_secret_file
from quorumlog.transport.tls import TlsSetupError

EXIT_OPERATIONAL = 1
PRODUCE_CHUNK_RECORDS = 10_000
FOLLOW_POLL_S = 0.2
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


def check_brokers(ctx: click.Context, param: click.Parameter, brokers: str | None) -> str | None:
    """A bad broker list is bad usage (exit 2, naming -b), found before any connection."""
    if brokers is not None:
        try:
            parse_brokers(brokers)
        except (ValueError, QuorumLogError) as exc:
            raise click.BadParameter(str(exc)) from None
    return brokers


def client_option_decorators(command: Callable, required: bool = True) -> Callable:
    """-b/--brokers, --timeout, --secret-file (the README's command line) and the TLS files."""
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
                required=required,
                callback=check_brokers,
                help="HOST:PORT,... of any nodes.",
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
            raise click.UsageError("give the brokers with -b/--brokers")
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
    """--topic and --partition (the README's command line)."""
    command = click.option(
        "--partition",
        type=click.IntRange(min=0),
        default=None,
        help="Default: 0 to consume; to produce, by key (round robin if unkeyed).",
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
@click.argument("source", type=click.File("rb"), default="-")
def produce(
    client: Client,
    acks: str,
    topic: str,
    partition: int | None,
    key_separator: str | None,
    source: BinaryIO,
) -> None:
    """Append one record per input line; print "FIRST_OFFSET LAST_OFFSET" (with records
    in several partitions, "PARTITION FIRST_OFFSET LAST_OFFSET" per partition).

    \b
    Examples:
      seq 1000 | quorumlog produce -b 127.0.0.1:7001
      quorumlog produce -b 127.0.0.1:7001 --acks leader events.txt
      quorumlog produce -b 127.0.0.1:7001 --topic events --key-separator : orders.txt
    """
    separator = key_separator.encode() if key_separator else None
    spans: dict[int, list[int]] = {}  # partition -> [first, last] offsets appended
    count = 0
    columns = (TextColumn("producing"), BarColumn(), TransferSpeedColumn())
    with _progress(_file_bytes(source), PROGRESS_BYTES_MIN, *columns) as advance:
        for chunk in _line_chunks(source):
            records = [_record(line, separator) for line in chunk]
            for target, part in _by_partition(client, topic, partition, records):
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
            count += len(chunk)
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


def _record(line: bytes, separator: bytes | None) -> Record:
    if separator is None:
        return Record(line)
    key, found, value = line.partition(separator)
    return Record(value, key=key) if found else Record(line)


def _by_partition(
    client: Client, topic: str, partition: int | None, records: list[Record]
) -> list[tuple[int | None, list[Record]]]:
    """One append per partition: keyed records each to their key's partition."""
    if partition is not None or all(r.key is None for r in records):
        return [(partition, records)]
    count = client.topics().get(topic)
    if count is None:
        raise UnknownTopicError(f"unknown topic {topic!r}")
    groups: dict[int | None, list[Record]] = {}
    for r in records:
        target = None if r.key is None else partition_of_key(r.key, count)
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
    help="earliest, latest or an offset.",
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
@topic_options
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
    partition: int | None,
    group_name: str | None,
    mode: str,
) -> None:
    """Print committed records, one value per line.

    \b
    Examples:
      quorumlog consume -b 127.0.0.1:7001 --from earliest --max 10
      quorumlog consume -b 127.0.0.1:7001 --from latest --follow --with-offsets
      quorumlog consume -b 127.0.0.1:7001 --from-time -10m --max 100
      quorumlog consume -b 127.0.0.1:7001 --topic events --group billing --follow
    """
    if from_time is not None:
        ctx = click.get_current_context()
        if ctx.get_parameter_source("start") is not ParameterSource.DEFAULT:
            raise click.UsageError("--from and --from-time: give one")
        if group_name is not None:
            raise click.UsageError(
                "a group member starts where its group is: move it with "
                "`group reset-offsets --to-time`, not --from-time"
            )
    if group_name is not None:
        if partition is not None:
            raise click.UsageError("a group member is given its partitions: drop --partition")
        from quorumlog.cli.group_commands import consume_in_group  # it builds on this module

        consume_in_group(client, group_name, mode, start, max_records, follow, with_offsets, topic)
        return
    where = {"topic": topic, "partition": partition or 0}
    if from_time is None:
        offset = _start_offset(client, start, where)
    else:
        offset = _time_offset(client, from_time, where)
    out = sys.stdout.buffer
    printed = 0
    try:
        columns = (TextColumn("consuming"), BarColumn(), TextColumn("{task.completed:,} records"))
        with _progress(max_records, PROGRESS_RECORDS_MIN, *columns) as advance:
            while max_records is None or printed < max_records:
                # As many as one read carries (1 MiB): asked for fewer, each read fetched and
                # decoded a whole megabyte again for a thousand small records (quadratic).
                want = (
                    READ_RECORDS
                    if max_records is None
                    else min(READ_RECORDS, max_records - printed)
                )
                records = client.read(offset, want, **where)
                if not records:
                    if not follow:
                        if printed == 0:
                            _say_if_past_the_end(client, offset, where)
                        break
                    time.sleep(FOLLOW_POLL_S)
                    continue
                if with_offsets:
                    out.write(b"".join([b"%d\t%s\n" % (r.offset, r.value) for r in records]))
                else:
                    out.write(b"\n".join([r.value for r in records]) + b"\n")
                out.flush()
                printed += len(records)
                advance(len(records))
                offset = records[-1].offset + 1
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (| head): not an error


READ_RECORDS = 1_000_000
KAFKA_ACKS = {"all": "quorum"}


def _say_if_past_the_end(client: Client, offset: int, where: dict) -> None:
    """Nothing printed from an offset past the next one: say where the log ends (it is
    not an error: --follow would wait there)."""
    end = client.end_offset(**where)
    if offset > end + 1:
        click.echo(
            f"{where['topic']}/{where['partition']} ends at offset {end}: nothing at {offset} "
            "yet (--follow waits for it)",
            err=True,
        )


def _time_offset(client: Client, from_time: int, where: dict) -> int:
    """The first offset stamped at or after `from_time`; past the end, the end (the end is
    asked first: a record committed between the two calls is then not skipped)."""
    end = client.end_offset(**where)
    found = client.offset_for_time(from_time, **where)
    return end + 1 if found is None else found


def _start_offset(client: Client, start: str, where: dict) -> int:
    if start == "earliest":
        return client.start_offset(**where)
    if start == "latest":
        return client.end_offset(**where) + 1
    try:
        offset = int(start)
    except ValueError:
        raise click.UsageError(
            f"--from takes earliest, latest or an offset, not {start!r}"
        ) from None
    if offset < 0:
        raise OffsetOutOfRangeError(f"offset {offset} is negative")
    return offset
