"""What the worker processes of a remote benchmark share, whichever client they drive: the
link to the driver, the values they append, the open loop's schedule, and the entry point
that `multiprocessing` starts."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

from quorumlog.bench.remote_meter import Meter
from quorumlog.bench.remote_spec import Failed, Ready, RunOptions, WorkerSpec, sent_at
from quorumlog.bench.workload import IncompressibleRecords

ERROR_PAUSE_S = 0.05  # after a failed call, so that a failing cluster is not spun on
INFLIGHT_MAX = 10_000  # open loop: calls in flight per producer before it waits
POLL_S = 0.002  # a reader at the end asks again after this (e2e latency includes it)
READ_RECORDS_MAX = 10_000
REPORT_EVERY_S = 0.1  # how often a worker looks whether a second has ended


class SetupError(Exception):
    """The cluster cannot be reached or refused the set-up: one line for the user."""


@dataclass(frozen=True)
class TopicState:
    partitions: int
    empty: bool


@dataclass
class Link:
    """A worker's end of the driver's queue and events (multiprocessing objects)."""

    worker: int
    queue: object
    go: object
    start: object
    finished_producing: object

    def send(self, message: object) -> None:
        self.queue.put(message)

    def ready(self) -> float:
        """Say it is ready, wait for every other worker; the shared start (wall clock)."""
        self.send(Ready(self.worker))
        self.go.wait()
        start_s = self.start.value
        time.sleep(max(0.0, start_s - time.time()))
        return start_s

    def producers_done(self) -> bool:
        return self.finished_producing.is_set()


class Values:
    """Incompressible values of `size` bytes, `per_call` to a call (zstd gains nothing)."""

    def __init__(self, size: int, per_call: int, worker: int):
        self._source = IncompressibleRecords(size, seed=worker + 1)
        self._size = size
        self._per_call = per_call
        self.batch_bytes = size * per_call

    def take(self) -> list[bytes]:
        return self._source.take(self._per_call)

    def warm(self) -> list[bytes]:
        return [bytes(self._size)]  # zeros: an e2e reader sees no send time in it


def call_times(start_s: float, end_s: float, options: RunOptions, per_call: int) -> Iterator[float]:
    """The open loop's intended send times of one producer: its share of `--rate`."""
    calls_per_s = options.rate / options.producers / per_call
    i = 0
    while (at_s := start_s + i / calls_per_s) < end_s:
        yield at_s
        i += 1


def count_read(
    meter: Meter, spec: WorkerSpec, values: list[bytes | None], asked_s: float, now_s: float
) -> None:
    """Records a reader got: consume times the read; e2e times each record from its send
    time and counts only this run's records."""
    if not spec.stamped:
        meter.count(len(values), sum(len(v or b"") for v in values), now_s - asked_s)
        return
    counted = 0
    for value in values:
        sent_s = sent_at(value, meter.start_s)
        if sent_s is not None:
            meter.latency(now_s - sent_s)
            counted += 1
    meter.count(counted, counted * spec.options.size, None)


def worker_main(spec: WorkerSpec, queue, go, start, finished_producing) -> None:
    """A worker process: Ctrl-C reaches the driver, which stops its workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    link = Link(spec.index, queue, go, start, finished_producing)
    if spec.options.kafka:
        from quorumlog.bench import remote_kafka as client
    else:
        from quorumlog.bench import remote_native as client
    try:
        client.run_worker(spec, link)
    except Exception as exc:  # one line for the user; the driver stops the run
        link.send(Failed(spec.index, " ".join(f"{type(exc).__name__}: {exc}".split())))
