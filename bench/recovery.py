"""`quorumlog bench recovery`: a follower N MB behind catches up (seed 004's claim).

For each setting, a fresh 3-node cluster: kill one follower, append N MB through the leader
(1 KiB records in batches of 15, 15.6 KB, so that a 32 KiB chunk holds two), note the
leader's committed end offset, restart the follower and time, from the restart:

- `up_s`: until the restarted node answers a status request;
- `first_byte_s`: until its log first grows (the leader's link redials with backoff);
- `caught_up_s`: until its commit_offset reaches that end offset (the figure asked for);
- `flushed_s`: until its flushed_offset does too (lazy recovery flushes in the background).

`catchup_mb_s` is N MB over `caught_up_s - first_byte_s`: the streaming itself, without the
process start and the redial. Settings, same run:

- lazy (the default: chunks sent with flush=false, `recovery_window_bytes` in flight);
- flush per chunk as seed 004 describes its baseline: the follower fsyncs each chunk before
  it answers, and the leader sends the next chunk on the answer (one in flight);
- flush before reply, pipelined: the follower fsyncs before it answers, but with lazy's
  window in flight, so that one fsync covers the chunks that arrived meanwhile (group
  commit): what lazy flush gains once the stream is pipelined anyway.

Each flush row has `ratio_flush_to_lazy`, its `caught_up_s` over lazy's (it includes the
process start and the redial, which can be up to 2 s of transport backoff), and
`ratio_streaming_flush_to_lazy`, the same for the streaming time alone. Then lazy across
`chunk_bytes_max` (the curve, one row per chunk size). Baseline, same run, same disk: the
raw disk loop writing the same batches with an fsync per 32 KiB (what flush-per-chunk may
reach at best) and with one fsync at the end (lazy's limit), measured before and after the
clusters ran, the better of the two taken as the machine's limit; `ratio_to_raw` divides a
row's `catchup_mb_s` by the matching one.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass

import trio

from quorumlog.bench.report import print_table
from quorumlog.bench.workload import (
    ACKS,
    KIB,
    MB,
    closed_loop,
    make_batches,
    raw_disk_mb_s,
    running_cluster,
    status_of,
    with_leader,
)
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.transport.errors import TransportError
from quorumlog.transport.messages import StatusReply, StatusRequest
from quorumlog.transport.tcp import open_connection

BATCH_RECORDS = 15
FILL_WINDOW = 16
POLL_S = 0.01
FLUSH_PER_CHUNK = "catch-up flush per chunk, 32KiB chunks, 1 in flight"
FLUSH_PIPELINED = "catch-up flush before reply, 32KiB chunks, pipelined"


@dataclass(frozen=True)
class Sizes:
    behind_bytes: int
    chunk_sizes: tuple[int, ...]
    timeout_s: float


FULL = Sizes(500 * MB, (32 * KIB, 128 * KIB, 512 * KIB, 1024 * KIB), timeout_s=600)
QUICK = Sizes(100 * MB, (32 * KIB, 512 * KIB), timeout_s=120)
TINY = Sizes(4 * MB, (32 * KIB, 512 * KIB), timeout_s=60)


def _fill(cluster: ProcessCluster, behind_bytes: int) -> int:
    """Append `behind_bytes` of records (acks quorum) and return the committed end offset."""
    batches = make_batches(BATCH_RECORDS)
    appends = max(1, behind_bytes // (BATCH_RECORDS * 1024))

    async def fill(address: str) -> int:
        await closed_loop(
            address, batches, BATCH_RECORDS, ACKS["quorum"], FILL_WINDOW, total_appends=appends
        )
        status = await status_of(address)
        assert status is not None, "the leader stopped answering"
        return status["commit_offset"]

    return with_leader(cluster, lambda address: trio.run(fill, address))


async def _watch(address: str, target: int, timeout_s: float) -> dict:
    """Poll the restarted node; times (from now) at which it answers, grows, commits
    `target` and flushes it, and the timeline of its dirty and flushed offsets."""
    start = trio.current_time()
    times: dict = {}
    timeline: list[tuple[float, int, int]] = []  # (seconds, dirty, flushed), for --plot
    initial_dirty: int | None = None
    with trio.fail_after(timeout_s):
        # Flushed can come before the follower hears the commit offset: wait for both.
        while not {"flushed_s", "caught_up_s"} <= times.keys():
            try:
                async with open_connection(address) as conn:
                    while not {"flushed_s", "caught_up_s"} <= times.keys():
                        reply = await conn.request(StatusRequest())
                        assert isinstance(reply, StatusReply)
                        status = reply.status
                        now = trio.current_time() - start
                        timeline.append((now, status["dirty_offset"], status["flushed_offset"]))
                        times.setdefault("up_s", now)
                        if initial_dirty is None:
                            initial_dirty = status["dirty_offset"]
                        if status["dirty_offset"] > initial_dirty:
                            times.setdefault("first_byte_s", now)
                        if status["commit_offset"] >= target:
                            times.setdefault("first_byte_s", now)
                            times.setdefault("caught_up_s", now)
                        if status["flushed_offset"] >= target:
                            times.setdefault("flushed_s", now)
                        await trio.sleep(POLL_S)
            except (TransportError, OSError):
                await trio.sleep(POLL_S)
    times["timeline"] = timeline
    return times


def _one(name: str, sizes: Sizes, raft: dict) -> dict:
    with running_cluster(f"recovery-{name}", raft=raft) as cluster:
        leader = cluster.wait_for_leader()
        follower = next(i for i in cluster.ids if i != leader)
        cluster.kill(follower)
        target = _fill(cluster, sizes.behind_bytes)
        cluster.start(follower)
        times = trio.run(_watch, cluster.address(follower), target, sizes.timeout_s)
        rss = cluster.peak_rss_mb()
    mb = sizes.behind_bytes / MB
    streaming_s = _streaming_s(times)
    return {
        "mb_behind": mb,
        **times,
        "catchup_mb_s": mb / streaming_s,
        "leader_peak_rss_mb": rss.get(leader),
        "follower_peak_rss_mb": rss.get(follower),
    }


def _streaming_s(times: dict) -> float:
    """From the first byte to caught up; at least one poll (a small log can arrive whole
    between two polls, which cannot tell a shorter time)."""
    return max(times["caught_up_s"] - times["first_byte_s"], POLL_S)


def _baselines(batch: bytes, volume: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="quorumlog-bench-recovery-raw-") as raw_dir:
        return {
            "per_chunk": raw_disk_mb_s(raw_dir, batch, volume, fsync_every=32 * KIB / len(batch)),
            "at_end": raw_disk_mb_s(raw_dir, batch, volume, fsync_every=volume / len(batch) + 1),
        }


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    batch = make_batches(BATCH_RECORDS, count=1)[0]
    volume = min(sizes.behind_bytes, 64 * MB)
    before = _baselines(batch, volume)
    rows: list[dict] = []

    lazy = _one("lazy", sizes, {})
    rows.append({"figure": "catch-up lazy (flush=false), 32KiB chunks", "chunk_kib": 32, **lazy})
    for figure, raft in (
        (FLUSH_PER_CHUNK, {"recovery_flush_every_chunk": True, "recovery_window_bytes": 1}),
        (FLUSH_PIPELINED, {"recovery_flush_every_chunk": True}),
    ):
        flush = _one("flush", sizes, raft)
        rows.append(
            {
                "figure": figure,
                "chunk_kib": 32,
                **flush,
                "ratio_flush_to_lazy": flush["caught_up_s"] / lazy["caught_up_s"],
                "ratio_streaming_flush_to_lazy": _streaming_s(flush) / _streaming_s(lazy),
            }
        )
    for chunk in sizes.chunk_sizes:
        result = lazy if chunk == 32 * KIB else _one("chunk", sizes, {"chunk_bytes_max": chunk})
        rows.append(
            {
                "figure": f"catch-up curve lazy, {chunk // KIB}KiB chunks",
                "chunk_kib": chunk // KIB,
                **result,
            }
        )

    after = _baselines(batch, volume)
    # The machine's limit is the best it showed in this run (other load may slow one try).
    best = {k: max(before[k], after[k]) for k in before}
    for row in rows:
        if row.get("catchup_mb_s"):
            flushes = row["figure"] in (FLUSH_PER_CHUNK, FLUSH_PIPELINED)
            raw = best["per_chunk"] if flushes else best["at_end"]
            row["ratio_to_raw"] = row["catchup_mb_s"] / raw
    for key, figure in (
        ("per_chunk", "baseline raw disk, 16 KiB writes, fsync per 32 KiB"),
        ("at_end", "baseline raw disk, 16 KiB writes, one fsync at the end"),
    ):
        rows.append(
            {
                "figure": figure,
                "mb_s": best[key],
                "mb_s_before": before[key],
                "mb_s_after": after[key],
            }
        )
    return rows


if __name__ == "__main__":
    start = time.perf_counter()
    print_table("bench recovery", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
    print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
