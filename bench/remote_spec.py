"""What `quorumlog bench produce|consume|e2e -b ...` hands its worker processes, and what they
send back: one frozen dataclass per message (they cross a multiprocessing queue), and the
send time that e2e records carry in their first bytes."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from quorumlog.bench.histogram import LatencyHistogram

WORKLOADS = ("produce", "consume", "e2e")
ACKS_LEVELS = ("quorum", "leader", "none")
STAMP = struct.Struct("<d")  # wall-clock send time, seconds: the first bytes of an e2e value
STAMP_BYTES = STAMP.size
INTERVAL_S = 1.0  # a progress line per second


@dataclass(frozen=True)
class RunOptions:
    workload: str  # one of WORKLOADS
    brokers: str | None  # quorumlog's own protocol, or
    kafka: str | None  # a Kafka bootstrap list: confluent-kafka does the work
    topic: str
    partitions: int  # when the topic is created
    replicas: int | None
    size: int  # value bytes
    records: int  # per append call
    window: int  # closed loop: calls in flight per producer (ignored with `rate`)
    rate: float | None  # open loop: records/s over all producers
    duration_s: float
    acks: str
    producers: int
    consumers: int
    timeout_s: float
    secret_file: str | None = None
    tls: tuple[tuple[str, str | None], ...] = ()  # the client's TLS files, by argument name

    @property
    def client(self) -> str:
        return "confluent-kafka" if self.kafka else "quorumlog"


@dataclass(frozen=True)
class WorkerSpec:
    role: str  # "produce" (appends) or "consume" (reads; e2e: reads and times records)
    index: int
    options: RunOptions
    partitions: tuple[int, ...]  # the partitions a consumer reads (a producer: all)
    stamped: bool  # e2e: values carry their send time; a consumer times each record by it


# --- worker -> driver ----------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    worker: int  # connected, warmed up; waits for the start


@dataclass(frozen=True)
class Interval:
    worker: int
    index: int  # second since the start
    records: int
    value_bytes: int
    errors: int
    latencies: LatencyHistogram


@dataclass(frozen=True)
class Done:
    worker: int
    role: str
    elapsed_s: float  # from the start to its last counted record


@dataclass(frozen=True)
class Failed:
    worker: int
    message: str  # one line, for the user


# --- e2e send times --------------------------------------------------------------------------


def stamped(value: bytes, sent_s: float) -> bytes:
    return STAMP.pack(sent_s) + value[STAMP_BYTES:]


def sent_at(value: bytes | None, since_s: float) -> float | None:
    """The send time an e2e value carries, or None for a record that is not one of this
    run's (written before it started: warm-up appends carry 0, other writers anything)."""
    if value is None or len(value) < STAMP_BYTES:
        return None
    (sent_s,) = STAMP.unpack_from(value)
    return sent_s if since_s <= sent_s <= time.time() else None
