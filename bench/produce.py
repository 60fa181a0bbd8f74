"""`quorumlog bench produce`: append throughput and latency of a 3-node cluster on loopback.

First what a user gets (bench/clients.py): 1 KiB records appended through the public
`AsyncClient` and `Client`, encoding and routing included. Then the server alone
(`server-only` rows): 1 KiB records (random, incompressible) in batches encoded before the
clock starts, appended by trio tasks sharing one raw pipelined connection to the leader
(the window is the number of tasks, so of appends in flight):

- 64 KiB batches (64 records per append), window 1 and 64, acks quorum | leader | none;
- one record per append, window 64, acks quorum | leader | none;
- open loop: acks=quorum single-record appends at a fixed arrival rate of half the
  closed-loop peak above, latency counted from each append's scheduled send time;
- the matrix: record size 100 B / 1 KiB / 16 KiB (appends of about 64 KiB) x acks quorum /
  leader / none x window 1 / 16 / 64 x cluster size 3 / 5, a row each (`--quick` runs each
  case for 1 s; the smoke test runs its corners);
- follower flush: 64 KiB batches, window 64, acks quorum, on two fresh clusters running
  side by side, one with the default `follower_flush = "quorum"` (followers fsync quorum
  entries before they answer), one with `"lazy"` (they answer at once and report their
  flushes after), measured in turn for a few rounds so that both see the same background
  load.

Closed-loop rows give records/s and MB/s as acknowledged, p50/p99 from the exact sample, and
`commit_records_s`: records over the time until every node held and committed them (for
acks leader/none the acknowledgement comes before that). The open-loop row gives the target
and the achieved rate. Baselines, same run, same disk, measured before and after the
clusters ran (the better of the two is the machine's limit, since other load on a shared
machine can only slow a try down):
the raw disk loop writing the same 64 KiB batches with an fsync after each
(`ratio_disk_div3` = MB/s over raw MB/s / 3, since three replicas share this one disk) and
with an fsync per 1 MiB (`ratio_disk1m_div3`, the physical limit with group commit), and a
raw loopback trio socket carrying the same bytes (`ratio_loopback`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass

import trio

from quorumlog.bench.clients import client_rows
from quorumlog.bench.report import median, print_table
from quorumlog.bench.resources import cpu_s, peak_rss_row
from quorumlog.bench.workload import (
    ACKS,
    KIB,
    AppendRun,
    closed_loop,
    closed_loop_drained,
    closed_loop_row,
    latency_fields,
    leader_address,
    make_batches,
    open_loop,
    raw_disk_mb_s,
    raw_loopback_mb_s,
    running_cluster,
    with_leader,
)
from quorumlog.cli.localcluster import ProcessCluster

BATCH_RECORDS = 64
WINDOWS = (1, 64)
LEVELS = ("quorum", "leader", "none")


@dataclass(frozen=True)
class Matrix:
    record_bytes: tuple[int, ...] = (100, 1024, 16 * KIB)
    levels: tuple[str, ...] = LEVELS
    windows: tuple[int, ...] = (1, 16, 64)
    nodes: tuple[int, ...] = (3, 5)


@dataclass(frozen=True)
class Sizes:
    duration_s: float  # each closed-loop case
    warmup_s: float
    open_loop_s: float
    disk_bytes: int  # raw disk baseline volume
    loopback_s: float
    flush_rounds: int  # alternations lazy / inline of the follower flush comparison
    flush_s: float  # each side of each round
    matrix_s: float  # each case of the matrix
    matrix: Matrix = Matrix()


FULL = Sizes(
    duration_s=8.0,
    warmup_s=1.0,
    open_loop_s=15.0,
    disk_bytes=256 << 20,
    loopback_s=2.0,
    flush_rounds=5,
    flush_s=3.0,
    matrix_s=3.0,
)
QUICK = Sizes(
    duration_s=2.0,
    warmup_s=0.3,
    open_loop_s=4.0,
    disk_bytes=64 << 20,
    loopback_s=1.0,
    flush_rounds=3,
    flush_s=1.0,
    matrix_s=1.0,
)
TINY = Sizes(
    duration_s=0.3,
    warmup_s=0.05,
    open_loop_s=0.5,
    disk_bytes=4 << 20,
    loopback_s=0.2,
    flush_rounds=1,
    flush_s=0.3,
    matrix_s=0.2,
    matrix=Matrix((100, 16 * KIB), ("quorum", "none"), (1, 64), (3,)),
)


def _row(figure: str, run: AppendRun, drain_s: float | None = None, **extra) -> dict:
    row = {
        "figure": figure,
        **extra,
        "records_s": run.records_s,
        "mb_s": run.mb_s,
        **latency_fields(run.latencies_s),
    }
    if drain_s is not None:
        # Records over the time until every node held and committed them all.
        row["commit_records_s"] = run.records / (run.elapsed_s + drain_s)
    row["errors"] = run.errors
    return row


def _add_ratios(rows: list[dict], base: dict) -> None:
    for row in rows:
        mb_s = row["mb_s"]
        row["ratio_disk_div3"] = mb_s / (base["disk"] / 3)
        row["ratio_disk1m_div3"] = mb_s / (base["disk_1m"] / 3)
        row["ratio_loopback"] = mb_s / base["loopback"]


def _closed(
    cluster: ProcessCluster,
    sizes: Sizes,
    batches: list[bytes],
    records_per_batch: int,
    acks: str,
    window: int,
    duration_s: float | None = None,
) -> tuple[AppendRun, float]:
    return closed_loop_drained(
        cluster,
        batches,
        records_per_batch,
        acks,
        window,
        duration_s or sizes.duration_s,
        sizes.warmup_s,
    )


def _baselines(root: str, batch: bytes, sizes: Sizes) -> dict:
    return {
        "disk": raw_disk_mb_s(root, batch, sizes.disk_bytes, fsync_every=1),
        "disk_1m": raw_disk_mb_s(
            root, batch, sizes.disk_bytes, fsync_every=1024 * KIB / len(batch)
        ),
        "loopback": trio.run(raw_loopback_mb_s, batch, sizes.loopback_s),
    }


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    big = make_batches(BATCH_RECORDS)
    single = make_batches(1, count=64)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="quorumlog-bench-produce-raw-") as raw_dir:
        before = _baselines(raw_dir, big[0], sizes)
    with running_cluster("produce") as cluster:
        rows += client_rows(cluster.brokers, sizes.duration_s, sizes.warmup_s)
        for window in WINDOWS:
            for acks in LEVELS:
                result, drain_s = _closed(cluster, sizes, big, BATCH_RECORDS, acks, window)
                rows.append(
                    _row(
                        f"server-only: 64KiB batches w{window} {acks}",
                        result,
                        drain_s,
                        acks=acks,
                        window=window,
                        records_per_append=BATCH_RECORDS,
                    )
                )
        peak = 0.0
        for acks in LEVELS:
            result, drain_s = _closed(cluster, sizes, single, 1, acks, 64)
            rows.append(
                _row(
                    f"server-only: 1-record appends w64 {acks}",
                    result,
                    drain_s,
                    acks=acks,
                    window=64,
                    records_per_append=1,
                )
            )
            if acks == "quorum":
                peak = result.records_s
        rate = max(peak / 2, 10.0)
        result = with_leader(
            cluster,
            lambda address: trio.run(
                open_loop, address, single, 1, ACKS["quorum"], rate, sizes.open_loop_s
            ),
        )
        rows.append(
            _row(
                "server-only: open loop 1-record quorum at half peak",
                result,
                acks="quorum",
                window=None,
                records_per_append=1,
                target_rate_s=rate,
            )
        )
        rss = peak_rss_row(cluster)
    rows += _follower_flush_rows(sizes, big)
    rows += _matrix_rows(sizes)
    with tempfile.TemporaryDirectory(prefix="quorumlog-bench-produce-raw-") as raw_dir:
        after = _baselines(raw_dir, big[0], sizes)
    # The machine's limit is the best it showed in this run (other load may slow one try).
    base = {k: max(before[k], after[k]) for k in before}
    _add_ratios(rows, base)
    return [*rows, *_baseline_rows(before, after, len(big[0])), rss]


def _matrix_rows(sizes: Sizes) -> list[dict]:
    m = sizes.matrix
    rows = []
    for nodes in m.nodes:
        with running_cluster(f"produce-matrix-{nodes}", size=nodes) as cluster:
            for record_bytes in m.record_bytes:
                for acks in m.levels:
                    for window in m.windows:
                        figure = f"matrix {record_bytes} B {acks} w{window} {nodes} nodes"
                        rows.append(
                            closed_loop_row(
                                cluster, record_bytes, window, acks, sizes.matrix_s, figure=figure
                            )
                        )
    return rows


def _follower_flush_rows(sizes: Sizes, big: list[bytes]) -> list[dict]:
    """Two fresh clusters side by side, lazy and inline (the default) follower flush,
    measured in turn (so that both see the same background load); each row merges its
    side's rounds."""
    runs: dict[str, list[tuple[AppendRun, float]]] = {"lazy": [], "quorum": []}
    with (
        running_cluster("produce-lazy", raft={"follower_flush": "lazy"}) as lazy,
        running_cluster("produce-inline") as inline,
    ):
        for _ in range(sizes.flush_rounds):
            for flag, cluster in (("lazy", lazy), ("quorum", inline)):
                runs[flag].append(
                    _closed(cluster, sizes, big, BATCH_RECORDS, "quorum", 64, sizes.flush_s)
                )
    rows = []
    for flag in ("lazy", "quorum"):
        merged = AppendRun(
            appends=sum(r.appends for r, _ in runs[flag]),
            records=sum(r.records for r, _ in runs[flag]),
            elapsed_s=sum(r.elapsed_s for r, _ in runs[flag]),
            latencies_s=[x for r, _ in runs[flag] for x in r.latencies_s],
            errors=sum(r.errors for r, _ in runs[flag]),
        )
        rows.append(
            _row(
                f"64KiB w64 quorum, follower_flush={flag}",
                merged,
                sum(d for _, d in runs[flag]),
                acks="quorum",
                window=64,
                records_per_append=BATCH_RECORDS,
                follower_flush=flag,
                rounds=sizes.flush_rounds,
            )
        )
    rows[1]["ratio_to_lazy"] = rows[1]["records_s"] / rows[0]["records_s"]
    return rows


def _baseline_rows(before: dict, after: dict, batch_bytes: int) -> list[dict]:
    rows = []
    for key, figure in (
        ("disk", "baseline raw disk, write+fsync per 64 KiB batch"),
        ("disk_1m", "baseline raw disk, 64 KiB writes, fsync per 1 MiB"),
        ("loopback", "baseline raw loopback trio socket"),
    ):
        rows.append(
            {
                "figure": figure,
                "mb_s": max(before[key], after[key]),
                "mb_s_before": before[key],
                "mb_s_after": after[key],
                "batch_kib": batch_bytes / KIB,
            }
        )
    return rows


def single_record(runs: int = 5, duration_s: float = 2.0, acks: str = "quorum") -> list[dict]:
    """Only the single-record case (window 64), `runs` times on one cluster, for profiling
    and before/after comparisons: a row per run, then the median, and the CPU each process
    spent per counted append (on a shared machine CPU per append is steadier than rate)."""
    single = make_batches(1, count=64)
    rows = []
    with running_cluster("produce-single") as cluster:
        address = leader_address(cluster)
        trio.run(lambda: closed_loop(address, single, 1, ACKS[acks], 64, duration_s=0.5))
        pids = {f"node{i}": p.pid for i, p in cluster.procs.items()}
        before = {name: cpu_s(pid) for name, pid in pids.items()}
        client_before = sum(os.times()[:2])
        appends = 0
        for i in range(runs):
            result = trio.run(
                lambda: closed_loop(
                    address, single, 1, ACKS[acks], 64, duration_s=duration_s, warmup_s=0.2
                )
            )
            appends += result.appends
            rows.append(_row(f"1-record appends w64 {acks} run {i + 1}", result, acks=acks))
        cpu = {name: cpu_s(pid) - before[name] for name, pid in pids.items()}
        cpu["client"] = sum(os.times()[:2]) - client_before
        leader = f"node{cluster.wait_for_leader()}"
    rows.append(
        {
            "figure": f"1-record appends w64 {acks} median of {runs}",
            "records_s": median(r["records_s"] for r in rows),
            **{
                f"{'leader' if name == leader else name}_cpu_us_per_append": 1e6 * s / appends
                for name, s in cpu.items()
            },
        }
    )
    return rows


if __name__ == "__main__":
    start = time.perf_counter()
    if "--single" in sys.argv:
        # python -m quorumlog.bench.produce --single [RUNS]: the single-record case alone.
        runs = [int(a) for a in sys.argv[1:] if a.isdigit()]
        print_table("bench produce, single-record", single_record(runs[0] if runs else 5))
    else:
        print_table("bench produce", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
    print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
