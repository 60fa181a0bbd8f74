"""`quorumlog bench compaction`: what the cleaner costs and what it gives back.

1. A pass over a log on this machine's disk (log/cleaner.py, in this process, no budget):
   MB/s of segments cleaned with few and with many distinct keys, bytes before and after,
   against a plain copy of the same segments (read, write, fsync) in the same run.
2. Three real nodes: append latency (1 record, 1 in flight, acks=quorum) on a topic
   without compaction, then on a compacted topic while the nodes' cleaners work through a
   backlog of replaced records; the ratio of their p99 (the aim: at most 1.5).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, replace

import trio

from quorumlog.bench.workload import latency_fields, running_cluster
from quorumlog.client.protocol import Record
from quorumlog.log.config import LogConfig
from quorumlog.log.files import OsFileSystem
from quorumlog.log.records import RawRecord, make_data_batch
from quorumlog.log.wal import Log, run_inline


@dataclass(frozen=True)
class Sizes:
    log_mib: int  # written to the log before a pass
    keys: tuple[int, ...]
    value_bytes: int
    live_s: float  # each latency phase on the cluster
    backlog_mib: int  # replaced records waiting for the cleaners


FULL = Sizes(256, (1_000, 1_000_000), 100, 20.0, 64)
QUICK = Sizes(64, (1_000, 100_000), 100, 8.0, 32)
TINY = Sizes(4, (1_000, 10_000), 100, 2.0, 2)
BATCH_RECORDS = 100
PASS_CONFIG = LogConfig(
    cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, segment_bytes_max=16 << 20
)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    rows = [_pass_row(sizes, keys) for keys in sizes.keys]
    rows.append(_live_row(sizes))
    return rows


def _pass_row(sizes: Sizes, keys: int) -> dict:
    root = tempfile.mkdtemp(prefix="quorumlog-bench-compaction-")
    try:
        config = replace(PASS_CONFIG, segment_bytes_max=max(1 << 20, (sizes.log_mib << 20) // 16))
        log = Log.open(OsFileSystem(), os.path.join(root, "log"), config, run_sync=run_inline)
        rng = random.Random(keys)
        value = rng.randbytes(sizes.value_bytes)
        written = 0
        now_ms = int(time.time() * 1000)
        while written < sizes.log_mib << 20:
            records = [
                RawRecord(b"key-%d" % rng.randrange(keys), value, now_ms)
                for _ in range(BATCH_RECORDS)
            ]
            log.append([make_data_batch(records, compress=False)], term=1)
            written += BATCH_RECORDS * (sizes.value_bytes + 12)
        trio.run(log.flush)
        before = log.size_bytes
        copy_s = _plain_copy_s(os.path.join(root, "log"), os.path.join(root, "copy"))
        start = time.perf_counter()
        planned = log.plan_clean(log.dirty_offset, now_ms)
        assert planned is not None
        result = planned.run()
        log.adopt_cleaned(result, now_ms)
        trio.run(log.flush)
        pass_s = time.perf_counter() - start
        log.close()
        return {
            "figure": f"a pass over {sizes.log_mib} MiB, {keys:,} keys",
            "keys": keys,
            "s": pass_s,
            "mb_s": before / 1e6 / pass_s,
            "copy_mb_s": before / 1e6 / copy_s,
            "ratio_to_copy": copy_s / pass_s,
            "bytes_before": before,
            "bytes_after": before - result.bytes_reclaimed,
            "records_removed": result.records_removed,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _plain_copy_s(log_dir: str, folder: str) -> float:
    """Seconds to read every segment and write it again, fsynced: the baseline."""
    os.makedirs(folder)
    start = time.perf_counter()
    for name in sorted(os.listdir(log_dir)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(log_dir, name), "rb") as src:
            data = src.read()
        with open(os.path.join(folder, name), "wb") as dst:
            dst.write(data)
            dst.flush()
            os.fsync(dst.fileno())
    return time.perf_counter() - start


def _live_row(sizes: Sizes) -> dict:
    topic = {"segment.bytes": 1 << 20, "min.cleanable.dirty.ratio": 0.01}
    with running_cluster("compaction") as cluster, cluster.client(timeout=30) as client:
        client.create_topic("plain", config={"segment.bytes": 1 << 20})
        client.create_topic("compacted", config={**topic, "cleanup.policy": "compact"})
        plain = _latencies(client, "plain", sizes.live_s)
        value = os.urandom(1000)
        for start in range(0, sizes.backlog_mib * 1024, 256):  # 1 KiB records, 100 keys
            batch = [Record(value, key=b"key-%d" % (i % 100)) for i in range(start, start + 256)]
            client.append(batch, topic="compacted")
        (before,) = client.describe_topic("compacted")
        window_ms = time.time() * 1000
        compacted = _latencies(client, "compacted", sizes.live_s)
        (after,) = client.describe_topic("compacted")
    last_clean_ms = (after.get("cleaner") or {}).get("last_clean_ms") or 0
    plain_fields, compacted_fields = latency_fields(plain), latency_fields(compacted)
    return {
        "figure": "append latency, 1 in flight: plain topic, then compacted while cleaning",
        "plain_p50_ms": plain_fields["p50_ms"],
        "plain_p99_ms": plain_fields["p99_ms"],
        "compacted_p50_ms": compacted_fields["p50_ms"],
        "compacted_p99_ms": compacted_fields["p99_ms"],
        "p99_ratio": compacted_fields["p99_ms"] / plain_fields["p99_ms"],
        "p50_ratio": compacted_fields["p50_ms"] / plain_fields["p50_ms"],
        "log_mb_before": before["size_bytes"] / 1e6,
        "log_mb_after": after["size_bytes"] / 1e6,
        "cleaned_during": last_clean_ms > window_ms,
        "backlog_mb": sizes.backlog_mib * 1.048576,
        "samples": min(plain_fields["samples"], compacted_fields["samples"]),
    }


def _latencies(client, topic: str, duration_s: float) -> list[float]:
    out = []
    deadline = time.perf_counter() + duration_s
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        client.append([Record(b"x" * 100, key=b"probe")], topic=topic)
        out.append(time.perf_counter() - start)
    return out
