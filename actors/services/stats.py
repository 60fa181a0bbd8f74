"""Plain counters and histograms a node keeps about itself (exported by quorumlog/server/metrics.py).

No metrics library here: the actors count, the service decides how to publish.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

# Seconds: 100 us .. 10 s, enough for fsyncs and quorum appends alike.
LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@dataclass(slots=True)
class Histogram:
    bounds: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound, count at or below it), the last bound "+Inf", as Prometheus wants."""
        out, running = [], 0
        for bound, n in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass(slots=True)
class NodeStats:
    appends: Counter = field(default_factory=Counter)  # by acks level
    append_bytes: Counter = field(default_factory=Counter)
    append_latency_s: dict[str, Histogram] = field(default_factory=dict)
    fsync_latency_s: Histogram = field(default_factory=Histogram)
    heartbeats_sent: int = 0  # heartbeat messages (batches of every group) to all peers
    # Peer messages not sent: no link to the peer, or its send queue was full (Raft resends).
    messages_dropped: int = 0

    def append_done(self, acks: str, size: int, seconds: float) -> None:
        self.appends[acks] += 1
        self.append_bytes[acks] += size
        self.append_latency_s.setdefault(acks, Histogram()).observe(seconds)
