"""A consumer's read-ahead is bounded in total, whatever the number of partitions."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PARTITIONS = 200
RECORDS = 256  # of 1 KiB per partition: 50 MiB in all
BUFFER_BYTES = 4 * 1024 * 1024
MARGIN_BYTES = 30 * 1024 * 1024  # the interpreter's own allocations while it consumes


def test_a_consumer_of_200_partitions_holds_its_buffer_bound(cluster):
    cluster.wait_for_leader()
    with cluster.client(timeout=30) as c:
        c.create_topic("wide", partitions=PARTITIONS)
        for p in range(PARTITIONS):
            c.append(
                [b"%d-%d-" % (p, i) + b"x" * 1024 for i in range(RECORDS)],
                topic="wide",
                partition=p,
            )
    # Its own process, so that its memory is its own: peak RSS over a baseline taken
    # once everything is imported and a call was made.
    script = textwrap.dedent(
        f"""
        import time
        from quorumlog import Client, Consumer

        def kib(field):
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith(field))

        with Client({cluster.brokers!r}) as c:
            c.end_offset(topic="wide", partition=0)
        before = kib("VmRSS:")
        got = 0
        with Consumer({cluster.brokers!r}, "slow", ["wide"], buffer_bytes={BUFFER_BYTES}) as consumer:
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                got += len(consumer.poll(100, 1.0))
                time.sleep(0.1)  # a slow application: the read-ahead fills up
        print(got, (kib("VmHWM:") - before) * 1024)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    got, grown = map(int, out.stdout.split())
    assert got > 0, out.stderr
    assert grown < BUFFER_BYTES + MARGIN_BYTES, f"grew by {grown / 2**20:.1f} MiB"
