"""What one consumer holds in memory while it reads many partitions slowly: run as its
own process, so that its memory is its own (bench consume's wide row, and a test).

    python -m quorumlog.bench.consumer_memory BROKERS TOPIC BUFFER_BYTES SECONDS

prints the records it polled and how much its peak RSS grew over a baseline taken once
everything is imported and a call was made (bytes).
"""

from __future__ import annotations

import sys
import time

from quorumlog import Client, Consumer

POLL_RECORDS = 100
POLL_PAUSE_S = 0.1  # a slow application: the read-ahead fills up


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def measure(brokers: str, topic: str, buffer_bytes: int, seconds: float) -> tuple[int, int]:
    with Client(brokers) as c:
        c.end_offset(topic=topic, partition=0)
    before = _kib("VmRSS:")
    polled = 0
    with Consumer(brokers, "memory", [topic], buffer_bytes=buffer_bytes) as consumer:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            polled += len(consumer.poll(POLL_RECORDS, 1.0))
            time.sleep(POLL_PAUSE_S)
    return polled, (_kib("VmHWM:") - before) * 1024


if __name__ == "__main__":
    brokers, topic, buffer_bytes, seconds = sys.argv[1:5]
    print(*measure(brokers, topic, int(buffer_bytes), float(seconds)))
