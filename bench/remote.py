"""`quorumlog bench produce|consume|e2e -b BROKERS` (or `--kafka BOOTSTRAP`): a workload
against a cluster that already runs, as `nats bench` and `kafka-producer-perf-test` do.

The driver sets the topic up, starts the workers (`--producers` and `--consumers`
processes, so that more than one core works), starts them all at one moment, prints a
progress line for every second once each worker has reported it, and at the end a table
and, as the last line, one JSON object. Latency histograms are merged bucket by bucket
(bench/histogram.py), never by averaging percentiles.
"""

from __future__ import annotations

import json
import multiprocessing
import queue as queues
import sys
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from quorumlog.bench.remote_meter import MB, Tally
from quorumlog.bench.remote_spec import Done, Failed, Interval, Ready, RunOptions, WorkerSpec
from quorumlog.bench.remote_workers import SetupError, TopicState, worker_main
from quorumlog.bench.report import cell

START_DELAY_S = 0.05  # from "go" to the shared start, so that every worker sees it ahead
STARTUP_S = 60.0  # a worker process's import, connection and warm-up, beyond --timeout
EXIT_OPERATIONAL = 1
EXIT_USAGE = 2


class RunError(Exception):
    """One line for the user and the exit code (docs/cli.md)."""

    def __init__(self, message: str, code: int = EXIT_OPERATIONAL):
        super().__init__(message)
        self.code = code


@dataclass
class Phase:
    tally: Tally
    elapsed_s: dict[int, float] = field(default_factory=dict)  # counted workers'


def _client(options: RunOptions):
    if options.kafka:
        from quorumlog.bench import remote_kafka as client
    else:
        from quorumlog.bench import remote_native as client
    return client


def _specs(options: RunOptions, roles: tuple[str, ...], partitions: int) -> list[WorkerSpec]:
    """Producers append to every partition (round robin); consumer i reads partitions
    i, i + C, i + 2C, ..."""
    specs: list[WorkerSpec] = []
    stamped = options.workload == "e2e"
    for role in roles:
        count = options.producers if role == "produce" else options.consumers
        for i in range(count):
            mine = range(partitions) if role == "produce" else range(i, partitions, count)
            specs.append(
                WorkerSpec(
                    role=role,
                    index=len(specs),
                    options=options,
                    partitions=tuple(mine),
                    stamped=stamped,
                )
            )
    return specs


def run(options: RunOptions, echo) -> dict:
    """The run's figures (printed by the caller); RunError for what the user must hear."""
    try:
        state = _client(options).setup(options)
    except SetupError as exc:
        raise RunError(str(exc)) from None
    if options.workload != "produce" and options.consumers > state.partitions:
        raise RunError(
            f"--consumers {options.consumers} is more than the {state.partitions} partitions "
            f"of {options.topic}: a consumer reads whole partitions",
            EXIT_USAGE,
        )
    if options.workload == "consume" and state.empty:
        echo(f"{options.topic} is empty: producing for {options.duration_s:g} s first")
        _phase(options, ("produce",), state, "fill", echo)
    roles = {"produce": ("produce",), "consume": ("consume",), "e2e": ("produce", "consume")}
    phase = _phase(options, roles[options.workload], state, options.workload, echo)
    return _figures(options, state, phase)


def _phase(
    options: RunOptions, roles: tuple[str, ...], state: TopicState, label: str, echo
) -> Phase:
    specs = _specs(options, roles, state.partitions)
    counted_role = roles[-1]  # e2e: the consumers' records and latencies
    counted = {s.index for s in specs if s.role == counted_role}
    phase = Phase(Tally(counted, label, echo))
    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    queue = context.Queue()
    go, producers_done = context.Event(), context.Event()
    start = context.Value("d", 0.0)
    workers = {
        s.index: context.Process(
            target=worker_main, args=(s, queue, go, start, producers_done), daemon=True
        )
        for s in specs
    }
    try:
        for process in workers.values():
            process.start()
        ready: set[int] = set()
        _collect(queue, workers, ready, Ready, STARTUP_S + options.timeout_s, phase)
        start.value = time.time() + START_DELAY_S
        go.set()
        producers = {s.index for s in specs if s.role == "produce"}
        done: set[int] = set()
        deadline_s = STARTUP_S + options.duration_s + options.timeout_s * 4
        while len(done) < len(specs):
            _collect(queue, workers, done, Done, deadline_s, phase, until_one=True)
            if producers <= done:
                producers_done.set()
        phase.tally.finish()
    finally:
        for process in workers.values():
            if process.is_alive():
                process.terminate()
            process.join(5)
    return phase


def _collect(queue, workers, seen: set[int], kind, within_s, phase, until_one=False) -> None:
    """Handle the workers' messages until every worker sent a `kind` (or, `until_one`, one
    more did); a failure or a worker that died without a word ends the run."""
    deadline_s = time.monotonic() + within_s
    wanted = len(seen) + 1 if until_one else len(workers)
    while len(seen) < wanted:
        try:
            message = queue.get(timeout=0.5)
        except queues.Empty:
            dead = [i for i, p in workers.items() if p.exitcode is not None and i not in seen]
            if dead:
                code = workers[dead[0]].exitcode
                raise RunError(f"worker {dead[0]} stopped (exit code {code})") from None
            if time.monotonic() > deadline_s:
                raise RunError(f"workers did not answer within {within_s:.0f} s") from None
            continue
        match message:
            case Failed(worker=worker, message=text):
                raise RunError(f"worker {worker}: {text}")
            case Interval():
                phase.tally.add(message)
            case Done(worker=worker, elapsed_s=elapsed_s):
                seen.add(worker)
                phase.tally.worker_done(worker)
                if worker in phase.tally.counted:
                    phase.elapsed_s[worker] = elapsed_s
            case Ready(worker=worker):
                seen.add(worker)


_LATENCY = {
    ("quorumlog", "produce"): "append call, from its (intended) send time to its answer",
    ("quorumlog", "consume"): "read call, from the request to its records",
    ("confluent-kafka", "produce"): "message, from its (intended) produce() to its delivery",
    ("confluent-kafka", "consume"): "consume() call, from the call to its messages",
    **{
        (client, "e2e"): "record, from its append's send time to its consumer"
        for client in ("quorumlog", "confluent-kafka")
    },
}


def _figures(options: RunOptions, state: TopicState, phase: Phase) -> dict:
    total = phase.tally.total
    elapsed_s = max(phase.elapsed_s.values(), default=0.0) or options.duration_s
    row = {
        "workload": options.workload,
        "client": options.client,
        "topic": options.topic,
        "partitions": state.partitions,
        "producers": options.producers if options.workload != "consume" else 0,
        "consumers": options.consumers if options.workload != "produce" else 0,
        "size": options.size,
        "records_per_call": options.records,
        "window": None if options.rate else options.window,
        "rate": options.rate,
        "acks": options.acks,
        "duration_s": options.duration_s,
        "records": total.records,
        "MB": round(total.value_bytes / MB, 3),
        "elapsed_s": round(elapsed_s, 3),
        "records_per_s": round(total.records / elapsed_s, 1),
        "MB_per_s": round(total.value_bytes / MB / elapsed_s, 3),
        **total.latencies.summary_ms(),
        "latency": _LATENCY[options.client, options.workload],
        "errors": total.errors + phase.tally.others.errors,
    }
    if options.workload == "e2e":
        row["records_produced"] = phase.tally.others.records
    return row


def print_figures(row: dict, echo) -> None:
    """The table (a row per figure: one run has too many for columns), then the last line:
    the figures as one JSON object."""
    table = Table(title=f"bench {row['workload']} ({row['client']})", caption=row["latency"])
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in row.items():
        if name != "latency":
            table.add_row(name, "" if value is None else cell(value))
    Console(file=sys.stdout).print(table)
    echo(json.dumps(row))
