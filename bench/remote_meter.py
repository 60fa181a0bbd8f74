"""Counting a remote benchmark: each worker process keeps a `Meter` and sends it, second by
second, as `Interval`s; the driver adds them up in a `Tally`, which prints a progress line
once every worker has reported a second, and the totals at the end.

Seconds are counted from one wall-clock start shared by every process (they all run on
this machine), so that the workers' second N is the same second."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from quorumlog.bench.histogram import LatencyHistogram
from quorumlog.bench.remote_spec import INTERVAL_S, Interval

MB = 1_000_000


class Meter:
    """One worker's counts for the second running; `flush` sends each finished second."""

    def __init__(self, send, worker: int, start_s: float):
        self._send = send
        self._worker = worker
        self.start_s = start_s
        self._index = 0
        self._fresh()
        self.last_s = start_s  # wall time of the last counted record

    def _fresh(self) -> None:
        self._records = self._bytes = self._errors = 0
        self._latencies = LatencyHistogram()

    def count(self, records: int, value_bytes: int, latency_s: float | None) -> None:
        self._records += records
        self._bytes += value_bytes
        if latency_s is not None:
            self._latencies.add(latency_s)
        self.last_s = time.time()

    def latency(self, latency_s: float) -> None:
        """One more latency sample (e2e: one per record) without counting records."""
        self._latencies.add(latency_s)

    def error(self) -> None:
        self._errors += 1

    def flush(self, final: bool = False) -> None:
        """Send every second that has ended (`final`: the one running too)."""
        now_index = math.floor((time.time() - self.start_s) / INTERVAL_S)
        while self._index < now_index or final:
            self._send(
                Interval(
                    self._worker,
                    self._index,
                    self._records,
                    self._bytes,
                    self._errors,
                    self._latencies,
                )
            )
            self._fresh()
            self._index += 1
            final = False

    @property
    def elapsed_s(self) -> float:
        return max(self.last_s - self.start_s, 1e-9)


@dataclass
class Second:
    records: int = 0
    value_bytes: int = 0
    errors: int = 0
    latencies: LatencyHistogram = field(default_factory=LatencyHistogram)
    reported: set[int] = field(default_factory=set)

    def add(self, interval: Interval) -> None:
        self.records += interval.records
        self.value_bytes += interval.value_bytes
        self.errors += interval.errors
        self.latencies.merge(interval.latencies)
        self.reported.add(interval.worker)


class Tally:
    """The driver's sums: per second (for the progress lines) and in total."""

    def __init__(self, counted: set[int], label: str, echo):
        self.counted = counted  # the workers whose records the figures count
        self._label = label
        self._echo = echo
        self._seconds: dict[int, Second] = {}
        self._printed = 0  # seconds printed so far
        self._done: set[int] = set()
        self.total = Second()
        self.others = Second()  # e2e: the producers' appends, beside the consumers' figures

    def add(self, interval: Interval) -> None:
        if interval.worker not in self.counted:
            self.others.add(interval)
            return
        self._seconds.setdefault(interval.index, Second()).add(interval)
        self.total.add(interval)
        self._print_complete()

    def worker_done(self, worker: int) -> None:
        """The worker reports no more seconds: the others' seconds need not wait for it."""
        self._done.add(worker)
        self._print_complete()

    def finish(self) -> None:
        """Print what is left."""
        self._print_complete(final=True)

    def _print_complete(self, final: bool = False) -> None:
        while self._printed in self._seconds:
            second = self._seconds[self._printed]
            if not final and not self.counted <= second.reported | self._done:
                return
            self._echo(self.progress_line(self._printed + 1, second))
            del self._seconds[self._printed]
            self._printed += 1

    def progress_line(self, at_s: int, second: Second) -> str:
        figures = second.latencies.summary_ms()
        latency = "  ".join(
            f"{name[:-3]} {'-' if figures[name] is None else f'{figures[name]:.2f}'} ms"
            for name in ("p50_ms", "p99_ms", "p999_ms")
        )
        errors = f"  errors {second.errors}" if second.errors else ""
        return (
            f"[{self._label} {at_s:3d} s] {second.records / INTERVAL_S:10,.0f} rec/s  "
            f"{second.value_bytes / MB / INTERVAL_S:8.2f} MB/s  {latency}{errors}"
        )
