"""`quorumlog bench compaction`: what the cleaner costs and what it gives back.

1. A pass over a log on this machine's disk (log/cleaner.py, in this process, no budget):
   MB/s of segments cleaned with few and with many distinct keys, bytes before and after,
   against a plain copy of the same segments (read, write, fsync) in the same run.
2. Three real nodes: append latency (1 record, 1 in flight, acks=quorum) on a probe topic
   beside a writer that replaces 100 keys' values, first in a topic without compaction,
   then in a compacted one whose cleaners work meanwhile; the ratio of their p99 (the
   aim: at most 1.5).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
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


FULL = Sizes(256, (1_000, 1_000_000), 100, 20.0)
QUICK = Sizes(64, (1_000, 100_000), 100, 12.0)
TINY = Sizes(4, (1_000, 10_000), 100, 2.0)
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
        cleaned = sum(c.old.size_bytes for c in result.cleaned)
        log.close()
        return {
            "figure": f"a pass over {sizes.log_mib} MiB, {keys:,} keys",
            "keys": keys,
            "s": pass_s,
            # The segments it rewrote: with more keys than its key map holds, one pass
            # cleans the part whose keys fit, the next one the rest (as Kafka's cleaner).
            "mb_s": cleaned / 1e6 / pass_s,
            "share_cleaned": cleaned / before,
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
    """Appends' latency on a probe topic, twice under the same background load: a writer
    replacing 100 keys' 1 KiB values in a topic without compaction, then in a compacted
    one, whose replicas' cleaners work through what it writes meanwhile."""
    small = {"segment.bytes": 1 << 20}
    compacted = {**small, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}
    with running_cluster("compaction") as cluster, cluster.client(timeout=30) as client:
        client.create_topic("probe", config=small)
        client.create_topic("bulk-plain", config=small)
        client.create_topic("bulk-compacted", config=compacted)
        plain, plain_mb = _latencies_under_load(cluster, client, "bulk-plain", sizes.live_s)
        window_ms = time.time() * 1000
        cleaning, cleaning_mb = _latencies_under_load(
            cluster, client, "bulk-compacted", sizes.live_s
        )
        (after,) = client.describe_topic("bulk-compacted")
    last_clean_ms = (after.get("cleaner") or {}).get("last_clean_ms") or 0
    plain_fields, cleaning_fields = latency_fields(plain), latency_fields(cleaning)
    return {
        "figure": "append latency, 1 in flight, beside a writer: without, then with cleaning",
        "plain_p50_ms": plain_fields["p50_ms"],
        "plain_p99_ms": plain_fields["p99_ms"],
        "cleaning_p50_ms": cleaning_fields["p50_ms"],
        "cleaning_p99_ms": cleaning_fields["p99_ms"],
        "p99_ratio": cleaning_fields["p99_ms"] / plain_fields["p99_ms"],
        "p50_ratio": cleaning_fields["p50_ms"] / plain_fields["p50_ms"],
        "writer_mb_plain": plain_mb,
        "writer_mb_compacted": cleaning_mb,
        "compacted_mb_after": after["size_bytes"] / 1e6,
        "cleaned_during": last_clean_ms > window_ms,
        "samples": min(plain_fields["samples"], cleaning_fields["samples"]),
    }


def _latencies_under_load(cluster, client, bulk_topic: str, duration_s: float):
    """Latencies of single appends to the probe topic while a thread of its own writes
    256 records of 1 KiB over 100 keys per append to `bulk_topic`; and the MB it wrote."""
    stop = threading.Event()
    written = [0]

    def write() -> None:
        with cluster.client(timeout=30) as writer:
            while not stop.is_set():
                values = os.urandom(256 * 1000)  # incompressible, as the disk must hold them
                batch = [
                    Record(values[i * 1000 : (i + 1) * 1000], key=b"key-%d" % (i % 100))
                    for i in range(256)
                ]
                writer.append(batch, topic=bulk_topic)
                written[0] += 256 * 1000

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        latencies = _latencies(client, "probe", duration_s)
    finally:
        stop.set()
        thread.join(60)
    return latencies, written[0] / 1e6


def _latencies(client, topic: str, duration_s: float) -> list[float]:
    out = []
    deadline = time.perf_counter() + duration_s
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        client.append([Record(b"x" * 100, key=b"probe")], topic=topic)
        out.append(time.perf_counter() - start)
    return out
