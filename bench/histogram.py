"""A latency histogram that merges exactly: log-spaced buckets (as HDR Histogram and
DDSketch keep them), so that the histograms of many processes and many seconds add up
bucket by bucket to the histogram of all their samples. A percentile of the merge is then
the percentile of every sample together, within the buckets' relative error, never an
average of percentiles.

Bucket i holds the values in (GAMMA**(i-1), GAMMA**i] seconds, and answers for them with
the value within RELATIVE_ERROR of all of them (DDSketch's representative value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

RELATIVE_ERROR = 0.01
GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(GAMMA)
VALUE_MIN_S = 1e-6  # below a microsecond, one bucket: nothing measured here is that fast


@dataclass
class LatencyHistogram:
    counts: dict[int, int] = field(default_factory=dict)  # bucket index -> samples
    count: int = 0
    max_s: float = 0.0

    def add(self, seconds: float) -> None:
        index = math.ceil(math.log(max(seconds, VALUE_MIN_S)) / _LOG_GAMMA)
        self.counts[index] = self.counts.get(index, 0) + 1
        self.count += 1
        self.max_s = max(self.max_s, seconds)

    def merge(self, other: LatencyHistogram) -> None:
        for index, n in other.counts.items():
            self.counts[index] = self.counts.get(index, 0) + n
        self.count += other.count
        self.max_s = max(self.max_s, other.max_s)

    def quantile_s(self, q: float) -> float | None:
        """Nearest-rank quantile (q in 0..1) of the samples, None without samples."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                # Never above the largest sample actually seen (the top bucket's answer
                # could be, by up to the relative error).
                return min(2 * GAMMA**index / (GAMMA + 1), self.max_s)
        raise AssertionError("counts add up to count")

    def summary_ms(self) -> dict[str, float | None]:
        """p50, p99, p999 and max in milliseconds (None without samples)."""
        out = {}
        for name, q in (("p50_ms", 0.50), ("p99_ms", 0.99), ("p999_ms", 0.999)):
            value = self.quantile_s(q)
            out[name] = None if value is None else round(value * 1000, 3)
        out["max_ms"] = round(self.max_s * 1000, 3) if self.count else None
        return out
