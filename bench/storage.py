"""`quorumlog bench storage`: the log against the raw disk, measured in the same run.

- append: 1 KiB records in 64 KiB batches, fsync after every batch and with group commit
  (a flusher task flushing whatever was appended while the last fsync ran), beside a plain
  Python loop writing the same bytes with the same number of fsyncs per batch;
- read: 32 KiB reads through the log beside a raw sequential read of the same files;
- group commit across partitions: N partitions each append a small batch, then one flush
  pass makes all of it durable: with a log per partition (the node's flusher syncs each
  partition's files in one job) against one log shared by the N partitions (one fsync), for
  N = 1 and 100 (the choice of docs/decisions/storage.md, "One log per partition");
- peak RSS of the process doing all of it (the worker runs in its own process).

The figures are medians over `repeats` alternating runs; ratios are log / raw.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import trio

from quorumlog.actors.services.worker import WorkerThread
from quorumlog.bench.report import median
from quorumlog.log.config import LogConfig
from quorumlog.log.files import OsFileSystem
from quorumlog.log.records import make_data_batch
from quorumlog.log.wal import Log, run_inline

RECORD_BYTES = 1024
BATCH_RECORDS = 64
READ_CHUNK_BYTES = 32 * 1024
MIB = 1024 * 1024


def _batch() -> bytes:
    rng = random.Random(1)
    records = [(None, rng.randbytes(RECORD_BYTES), 0, None) for _ in range(BATCH_RECORDS)]
    return make_data_batch(records, compress=False)


async def _log_append(
    directory: str, batch: bytes, count: int, group_commit: bool
) -> tuple[float, int]:
    """Append `count` batches; returns (seconds, fsync rounds)."""
    worker = WorkerThread()
    log = Log.open(OsFileSystem(), directory, LogConfig(), run_sync=worker)
    flushes = 0
    start = time.perf_counter()
    if not group_commit:
        for _ in range(count):
            log.append([batch], term=1)
            await log.flush()
            flushes += 1
    else:
        appended = trio.Event()
        done = False

        async def flusher():
            nonlocal flushes, appended
            while not done or log.flushed_offset < log.dirty_offset:
                if log.flushed_offset == log.dirty_offset:
                    await appended.wait()
                    appended = trio.Event()
                await log.flush()
                flushes += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(flusher)
            for i in range(count):
                log.append([batch], term=1)
                appended.set()
                if i % 4 == 3:
                    await trio.sleep(0)
            done = True
            appended.set()
    elapsed = time.perf_counter() - start
    log.close()
    worker.stop()
    return elapsed, flushes


def _raw_append(path: str, batch: bytes, count: int, fsync_every: float) -> float:
    """The baseline: write the same bytes, fsync after the same share of batches."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = time.perf_counter()
    due = 0.0
    for _ in range(count):
        os.write(fd, batch)
        due += 1
        if due >= fsync_every:
            os.fsync(fd)
            due -= fsync_every
    os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def _log_read(directory: str) -> tuple[float, int]:
    log = Log.open(OsFileSystem(), directory, LogConfig(verify_on_open=False), run_sync=run_inline)
    start = time.perf_counter()
    offset, total = 0, 0
    while offset <= log.dirty_offset:
        chunk = log.read(offset, READ_CHUNK_BYTES)
        total += len(chunk.data)
        offset = chunk.last_offset + 1
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed, total


def _raw_read(directory: str) -> tuple[float, int]:
    start = time.perf_counter()
    total = 0
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        position = 0
        while data := os.pread(fd, READ_CHUNK_BYTES, position):
            position += len(data)
        total += position
        os.close(fd)
    return time.perf_counter() - start, total


PARTITION_BATCH_RECORDS = 4  # a small append per partition per pass: the costly case
PARTITION_COUNTS = (1, 100)


def _flush_passes(logs: list[Log], batches_per_log: int, batch: bytes, passes: int) -> list[float]:
    """Seconds of each pass: every log appends, then one job syncs every log's files."""
    seconds = []
    for _ in range(passes):
        for log in logs:
            log.append([batch] * batches_per_log, term=1)
        start = time.perf_counter()
        jobs = [log.begin_flush() for log in logs]
        for job in jobs:
            job.run()
        for log, job in zip(logs, jobs, strict=True):
            log.end_flush(job, durable=True)
        seconds.append(time.perf_counter() - start)
    return seconds


def _partition_flush_rows(work_dir: str, passes: int) -> list[dict]:
    rng = random.Random(2)
    records = [(None, rng.randbytes(RECORD_BYTES), 0, None) for _ in range(PARTITION_BATCH_RECORDS)]
    batch = make_data_batch(records, compress=False)
    rows = []
    for partitions in PARTITION_COUNTS:
        results = {}
        for layout in ("log per partition", "one shared log"):
            path = os.path.join(work_dir, f"partitions-{partitions}-{layout.split()[0]}")
            shutil.rmtree(path, ignore_errors=True)
            count = partitions if layout == "log per partition" else 1
            logs = [
                Log.open(
                    OsFileSystem(), os.path.join(path, str(i)), LogConfig(), run_sync=run_inline
                )
                for i in range(count)
            ]
            per_log = 1 if count == partitions else partitions
            results[layout] = _flush_passes(logs, per_log, batch, passes)
            for log in logs:
                log.close()
            shutil.rmtree(path, ignore_errors=True)
        own, shared = (median(results[k]) for k in ("log per partition", "one shared log"))
        rows.append(
            {
                "figure": f"flush pass, {partitions} partitions appending, log per partition",
                "pass_ms": own * 1e3,
                "shared_log_pass_ms": shared * 1e3,
                "ratio": own / shared,
                "mb_s": partitions * len(batch) / own / 1e6,
                "shared_log_mb_s": partitions * len(batch) / shared / 1e6,
            }
        )
    return rows


def _worker(work_dir: str, per_batch_mib: int, group_mib: int, repeats: int) -> list[dict]:
    batch = _batch()
    rows = []
    mb = len(batch) / 1e6

    def fresh(name: str) -> str:
        path = os.path.join(work_dir, name)
        shutil.rmtree(path, ignore_errors=True)
        if os.path.exists(path + ".raw"):
            os.remove(path + ".raw")
        return path

    for mode, size_mib in (("fsync_per_batch", per_batch_mib), ("group_commit", group_mib)):
        count = size_mib * MIB // len(batch)
        log_s, raw_s, rounds = [], [], []
        for _ in range(repeats):
            path = fresh(mode)
            seconds, flushes = trio.run(_log_append, path, batch, count, mode == "group_commit")
            log_s.append(seconds)
            rounds.append(flushes)
            raw_s.append(_raw_append(path + ".raw", batch, count, count / flushes))
        log_mbs = count * mb / median(log_s)
        raw_mbs = count * mb / median(raw_s)
        rows.append(
            {
                "figure": f"append {mode}",
                "bytes_mib": size_mib,
                "log_mb_s": log_mbs,
                "raw_mb_s": raw_mbs,
                "ratio": log_mbs / raw_mbs,
                "fsyncs": int(median(rounds)),
                "records_s": count * BATCH_RECORDS / median(log_s),
            }
        )
    # Read the last group-commit log back, alternating with the raw read of the same files.
    path = os.path.join(work_dir, "group_commit")
    log_r, raw_r = [], []
    for _ in range(repeats):
        seconds, total = _log_read(path)
        log_r.append(seconds)
        raw_r.append(_raw_read(path)[0])
    log_mbs = total / 1e6 / median(log_r)
    raw_mbs = total / 1e6 / median(raw_r)
    rows.append(
        {
            "figure": "read 32KiB chunks",
            "bytes_mib": total // MIB,
            "log_mb_s": log_mbs,
            "raw_mb_s": raw_mbs,
            "ratio": log_mbs / raw_mbs,
        }
    )
    rows += _partition_flush_rows(work_dir, passes=20 * repeats)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows.append({"figure": "peak RSS (append + read)", "bytes_mib": group_mib, "rss_mb": peak_mb})
    return rows


def run(quick: bool = False, work_dir: str | None = None) -> list[dict]:
    """Run the scenario in a fresh worker process, so that its peak RSS is its own."""
    per_batch_mib, group_mib, repeats = (16, 128, 3) if quick else (64, 1024, 3)
    own_dir = work_dir is None
    work_dir = work_dir or tempfile.mkdtemp(prefix="quorumlog-bench-storage-")
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "quorumlog.bench.storage",
                work_dir,
                str(per_batch_mib),
                str(group_mib),
                str(repeats),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        if own_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    directory, per_batch, group, reps = sys.argv[1], *map(int, sys.argv[2:5])
    print(json.dumps(_worker(directory, per_batch, group, reps)))
