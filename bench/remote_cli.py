"""The options of `quorumlog bench produce|consume|e2e -b BROKERS` (or `--kafka BOOTSTRAP`),
and how they and the local scenarios' options share one command.

`produce` and `consume` are also local scenarios (they start clusters of their own): given
-b or --kafka on the command line they run against that cluster instead. QUORUMLOG_BROKERS
does not count, so that a shell that sets it still runs the local scenarios."""

from __future__ import annotations

import click
from click.core import ParameterSource

from quorumlog.bench.remote_spec import ACKS_LEVELS, STAMP_BYTES, WORKLOADS, RunOptions
from quorumlog.cli.commands import check_brokers, tls_options

LOCAL_ONLY = ("quick", "seeds", "seed", "faults", "steps", "plot")
SIZE_MAX = 1 << 20  # one record's value; bigger ones are refused by the cluster anyway

HELP = """
\b
Against a cluster that already runs (none is started), with -b or --kafka:
  quorumlog bench produce -b HOST:PORT,... [--topic T] [--size B] [--records N]
        [--window W | --rate R] [--duration S] [--acks quorum|leader|none] [--producers P]
  quorumlog bench consume -b ... [--consumers C]   # reads the topic from its start
        (an empty or new topic is first filled by producing for --duration, not counted)
  quorumlog bench e2e -b ... [--producers P] [--consumers C]   # append-to-consume latency
  quorumlog bench produce --kafka HOST:PORT ...    # the same through confluent-kafka
A progress line every second, a table, and last one JSON line: records_per_s, MB_per_s,
p50_ms, p99_ms, p999_ms (produce: per append call from its intended send time; consume:
per read; e2e: per record, from its send time, carried in its first 8 bytes, to its
consumer).
"""

PROCESSES_MAX = 64


def _number(flag: str, kind, default, text: str):
    return click.option(
        flag, type=kind, default=default, show_default=default is not None, help=text
    )


_OPTIONS = (
    click.option(
        "--kafka",
        default=None,
        callback=check_brokers,
        metavar="BOOTSTRAP",
        help="Run the workload through confluent-kafka against this Kafka-protocol cluster "
        "(quorumlog's --kafka-listen, Kafka, Redpanda); -b is then not used.",
    ),
    click.option(
        "--topic", default="quorumlog-bench", show_default=True, help="Created if missing."
    ),
    _number("--partitions", click.IntRange(min=1), 1, "Of a topic created."),
    _number(
        "--replicas", click.IntRange(min=1), None, "Of a topic created (default: the cluster's)."
    ),
    _number("--size", click.IntRange(1, SIZE_MAX), 1024, "Value bytes."),
    _number("--records", click.IntRange(min=1), 1, "Records per append call."),
    _number("--window", click.IntRange(min=1), 16, "Closed loop: calls in flight per producer."),
    _number(
        "--rate",
        click.FloatRange(min=0, min_open=True),
        None,
        "Open loop: records/s over all producers, latency from each call's intended send time.",
    ),
    _number("--duration", click.FloatRange(min=0, min_open=True), 10.0, "Seconds."),
    click.option("--acks", type=click.Choice(ACKS_LEVELS), default="quorum", show_default=True),
    _number("--producers", click.IntRange(1, PROCESSES_MAX), 1, "Producer processes."),
    _number(
        "--consumers",
        click.IntRange(1, PROCESSES_MAX),
        1,
        "Consumer processes (each reads whole partitions).",
    ),
)
REMOTE_ONLY = (
    "kafka", "topic", "partitions", "replicas", "size", "records", "window", "rate",
    "duration", "acks", "producers", "consumers",
)  # fmt: skip


def remote_options(command):
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def remote_run(name: str, params: dict) -> RunOptions | None:
    """The remote run the command line asks for, None for a local scenario; a usage error
    for a mix of the two."""
    ctx = click.get_current_context()

    def given(param: str) -> bool:
        return ctx.get_parameter_source(param) is ParameterSource.COMMANDLINE

    remote = given("brokers") or params["kafka"] is not None
    if not remote:
        if name == "e2e":
            raise click.UsageError("e2e runs against a cluster: give -b BROKERS or --kafka")
        extra = [p for p in REMOTE_ONLY if given(p)]
        if extra:
            raise click.UsageError(
                f"--{extra[0]} needs -b BROKERS or --kafka BOOTSTRAP "
                f"(bench {name} without them runs the local scenario)"
            )
        return None
    if name not in WORKLOADS:
        raise click.UsageError(f"-b/--kafka run produce, consume or e2e, not {name}")
    local = [p for p in LOCAL_ONLY if given(p)]
    if local:
        raise click.UsageError(f"--{local[0]} is for the local scenarios, not with -b/--kafka")
    if given("window") and params["rate"] is not None:
        raise click.UsageError("--window and --rate exclude each other (closed or open loop)")
    if name == "e2e" and params["size"] < STAMP_BYTES:
        raise click.UsageError(f"e2e needs --size {STAMP_BYTES} or more: the send time rides in it")
    return RunOptions(
        workload=name,
        brokers=params["brokers"],
        kafka=params["kafka"],
        topic=params["topic"],
        partitions=params["partitions"],
        replicas=params["replicas"],
        size=params["size"],
        records=params["records"],
        window=params["window"],
        rate=params["rate"],
        duration_s=params["duration"],
        acks=params["acks"],
        producers=params["producers"],
        consumers=params["consumers"],
        timeout_s=params["timeout"] or 10.0,
        secret_file=params["secret_file"],
        tls=tuple(tls_options().items()),
    )
