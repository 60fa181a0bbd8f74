"""A consumer's read-ahead is bounded in total, whatever the number of partitions."""

from __future__ import annotations

import subprocess
import sys

PARTITIONS = 200
RECORDS = 256  # of 1 KiB per partition: 50 MiB in all
BUFFER_BYTES = 4 * 1024 * 1024
MARGIN_BYTES = 30 * 1024 * 1024  # the interpreter's own allocations while it consumes


def test_a_consumer_of_200_partitions_holds_its_buffer_bound(cluster):
    cluster.wait_for_leader()
    with cluster.client(timeout=30) as c:
        c.create_topic("wide", partitions=PARTITIONS)
        for p in range(PARTITIONS):
            records = [b"%d-%d-" % (p, i) + b"x" * 1024 for i in range(RECORDS)]
            c.append(records, topic="wide", partition=p)
    args = ["-m", "quorumlog.bench.consumer_memory", cluster.brokers, "wide", str(BUFFER_BYTES)]
    out = subprocess.run(
        [sys.executable, *args, "6"], capture_output=True, text=True, timeout=120, check=True
    )
    polled, grown = map(int, out.stdout.split())
    assert polled > 0, out.stderr
    assert grown < BUFFER_BYTES + MARGIN_BYTES, f"grew by {grown / 2**20:.1f} MiB"
