"""Smoke tests of the benchmark scenarios: each runs in its smallest size against real
`quorumlog serve` processes and must return, and write as JSON lines, the figures it
promises. No timing assertions: the numbers depend on the machine."""

from __future__ import annotations

import itertools
import json
import math
import os

import pytest

from quorumlog.bench import failover, gray, produce, recovery, storage
from quorumlog.bench.report import print_table, write_jsonl
from quorumlog.bench.scenarios import SCENARIOS, scenario
from quorumlog.bench.workload import LeaderMoved, percentile, with_leader
from tests.serving import serve_pids

LATENCY = {"records_s", "mb_s", "p50_ms", "p99_ms", "samples"}
RATIOS = {"ratio_disk_div3", "ratio_disk1m_div3", "ratio_loopback"}


def _no_serve_left() -> None:
    """No `quorumlog serve` of a bench cluster (data in a quorumlog-bench-* folder) runs."""
    left = serve_pids("quorumlog-bench-")
    assert not left, f"bench nodes left running: {left}"


def _written(tmp_path, name: str, rows: list[dict]) -> list[dict]:
    """Rows as the harness stores them: JSON lines with the scenario and machine facts."""
    path = tmp_path / f"{name}.jsonl"
    write_jsonl(str(path), name, rows)
    print_table(name, rows)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == len(rows)
    for line in lines:
        assert line["scenario"] == name
        assert isinstance(line["figure"], str) and line["figure"]
        assert {"cores", "python", "versions"} <= set(line["machine"])
    return lines


def _by_figure(rows: list[dict]) -> dict[str, dict]:
    figures = {r["figure"]: r for r in rows}
    assert len(figures) == len(rows), "figure names are unique"
    return figures


def _positive(row: dict, *fields: str) -> None:
    for name in fields:
        value = row[name]
        assert isinstance(value, int | float) and value > 0 and math.isfinite(value), (name, row)


def test_every_scenario_is_registered():
    for name in ("storage", "transport", "produce", "recovery", "failover"):
        assert name in SCENARIOS
    assert scenario("produce") is produce.run
    assert scenario("recovery") is recovery.run
    assert scenario("failover") is failover.run


def test_percentile_is_nearest_rank_on_the_exact_sample():
    sample = [float(i) for i in range(1, 101)]
    assert percentile(sample, 50) == 50.0
    assert percentile(sample, 99) == 99.0
    assert percentile(sample, 100) == 100.0
    assert percentile([3.0], 99) == 3.0
    assert math.isnan(percentile([], 50))


def test_with_leader_starts_over_when_leadership_moves(monkeypatch):
    monkeypatch.setattr("quorumlog.bench.workload.leader_address", lambda cluster: "127.0.0.1:1")
    monkeypatch.setattr("quorumlog.bench.workload.time.sleep", lambda s: None)
    calls = []

    def measure(address: str) -> str:
        calls.append(address)
        if len(calls) == 1:
            raise ExceptionGroup("nursery", [LeaderMoved("127.0.0.1:2")])
        return "done"

    assert with_leader(None, measure) == "done"
    assert len(calls) == 2

    def other_error(address: str) -> str:
        raise ExceptionGroup("nursery", [ValueError("boom")])

    with pytest.raises(ExceptionGroup):
        with_leader(None, other_error)


def test_storage(tmp_path):
    rows = _by_figure(_written(tmp_path, "storage", storage.run(quick=True)))
    for figure in ("append fsync_per_batch", "append group_commit", "read 32KiB chunks"):
        _positive(rows[figure], "log_mb_s", "raw_mb_s", "ratio")
    _positive(rows["peak RSS (append + read)"], "rss_mb")
    for partitions in (1, 100):
        row = rows[f"flush pass, {partitions} partitions appending, log per partition"]
        _positive(row, "pass_ms", "shared_log_pass_ms", "ratio")


@pytest.mark.slow
def test_partitions_smallest(tmp_path):
    from quorumlog.bench import partitions

    rows = _by_figure(_written(tmp_path, "partitions", partitions.run(tiny=True)))
    for n in (1, 3, 6, 12):
        _positive(
            rows[f"aggregate acks=quorum, 64 x 1 KiB appends, w64, {n} partitions"], "records_s"
        )
    _positive(rows["create a topic of 10 partitions, until all lead"], "s")
    _positive(rows["controller failover: kill its leader -> topic created"], "median_s")
    _positive(rows["controller failover: kill its leader -> describe exact"], "median_s")
    idle = rows["idle, 20 partitions x 3: heartbeats per node pair per s"]
    assert 0 < idle["max"] <= 2 * idle["target"], idle
    (move,) = [row for figure, row in rows.items() if figure.startswith("members remove ->")]
    _positive(move, "s", "mb_s", "append_same_mb_s")


def test_moves_smallest(tmp_path):
    from quorumlog.bench import moves

    (row,) = _written(tmp_path, "moves", moves.run(tiny=True))
    _positive(row, "s", "mb_s", "append_p99_ms_before", "append_p99_ms_during")


def test_console_smallest(tmp_path):
    from quorumlog.bench import console

    rows = _by_figure(_written(tmp_path, "console", console.run(tiny=True)))
    assert set(rows) == {f"GET {page}" for page in console.PAGES}
    for row in rows.values():
        _positive(row, "median_ms", "p90_ms", "kb")


@pytest.mark.slow
def test_elections_smallest(tmp_path):
    from quorumlog.bench import elections

    rows = _by_figure(_written(tmp_path, "elections", elections.run(tiny=True)))
    _positive(rows["create 20 partitions x 3: s until every one leads"], "s")
    for event in ("one node lost", "two restarted", "all restarted"):
        row = rows[f"20 partitions x 3, {event}: s until every partition leads"]
        _positive(row, "s", "target_s", "term_max")
        assert len(row["cpu_cores"]) == (2 if event == "one node lost" else 3), row
    _no_serve_left()


@pytest.mark.slow
def test_produce(tmp_path):
    rows = _by_figure(_written(tmp_path, "produce", produce.run(quick=True, tiny=True)))
    for figure in (
        "client: AsyncClient 1 rec/call w64 quorum",
        "client: AsyncClient 1 rec/call w64 leader",
        "client: AsyncClient 1 rec/call w1 quorum",
        "client: AsyncClient 1 rec/call w1 leader",
        "client: AsyncClient 64 rec/call w64 quorum",
        "client: Client 1 rec/call 64 threads quorum",
        "client: Client 1 rec/call 1 thread quorum",
    ):
        _positive(rows[figure], *LATENCY, "mb_s")
        assert rows[figure]["errors"] == 0
    for threads in ("64 threads", "1 thread"):
        _positive(rows[f"client: Client 1 rec/call {threads} quorum"], "ratio_to_async")
    for window in (1, 64):
        for acks in ("quorum", "leader", "none"):
            row = rows[f"server-only: 64KiB batches w{window} {acks}"]
            assert LATENCY | RATIOS | {"commit_records_s", "errors"} <= set(row)
            assert (row["acks"], row["window"], row["records_per_append"]) == (acks, window, 64)
            _positive(row, *LATENCY, *RATIOS, "commit_records_s")
    for acks in ("quorum", "leader", "none"):
        row = rows[f"server-only: 1-record appends w64 {acks}"]
        assert row["records_per_append"] == 1
        _positive(row, *LATENCY, *RATIOS, "commit_records_s")
    open_loop = rows["server-only: open loop 1-record quorum at half peak"]
    _positive(open_loop, *LATENCY, "target_rate_s")
    peak = rows["server-only: 1-record appends w64 quorum"]["records_s"]
    assert open_loop["target_rate_s"] == pytest.approx(max(peak / 2, 10.0))
    lazy = rows["64KiB w64 quorum, follower_flush=lazy"]
    inline = rows["64KiB w64 quorum, follower_flush=quorum"]
    assert (lazy["follower_flush"], inline["follower_flush"]) == ("lazy", "quorum")
    _positive(lazy, *LATENCY, *RATIOS)
    _positive(inline, *LATENCY, *RATIOS, "ratio_to_lazy")
    m = produce.TINY.matrix
    matrix = [r for r in rows.values() if r["figure"].startswith("matrix")]
    cases = {(r["record_bytes"], r["acks"], r["window"], r["nodes"]) for r in matrix}
    assert cases == set(itertools.product(m.record_bytes, m.levels, m.windows, m.nodes))
    for row in matrix:
        _positive(row, *LATENCY, *RATIOS, "peak_rss_mb_max")
        assert row["errors"] == 0
    for figure in (
        "baseline raw disk, write+fsync per 64 KiB batch",
        "baseline raw disk, 64 KiB writes, fsync per 1 MiB",
        "baseline raw loopback trio socket",
    ):
        _positive(rows[figure], "mb_s", "mb_s_before", "mb_s_after")
    assert all(row.get("errors", 0) == 0 for row in rows.values())
    _no_serve_left()


def test_recovery(tmp_path):
    rows = _by_figure(_written(tmp_path, "recovery", recovery.run(quick=True, tiny=True)))
    timings = ("up_s", "first_byte_s", "caught_up_s", "flushed_s", "catchup_mb_s", "ratio_to_raw")
    lazy = rows["catch-up lazy (flush=false), 32KiB chunks"]
    flushes = [rows[recovery.FLUSH_PER_CHUNK], rows[recovery.FLUSH_PIPELINED]]
    for row in (lazy, *flushes):
        _positive(row, "mb_behind", *timings)
        assert row["up_s"] <= row["first_byte_s"] <= row["caught_up_s"] <= row["flushed_s"]
    for row in flushes:
        _positive(row, "ratio_flush_to_lazy", "ratio_streaming_flush_to_lazy")
    curve = [r for r in rows.values() if r["figure"].startswith("catch-up curve")]
    assert [r["chunk_kib"] for r in curve] == [k // 1024 for k in recovery.TINY.chunk_sizes]
    for row in curve:
        _positive(row, *timings)
    for figure in (
        "baseline raw disk, 16 KiB writes, fsync per 32 KiB",
        "baseline raw disk, 16 KiB writes, one fsync at the end",
    ):
        _positive(rows[figure], "mb_s", "mb_s_before", "mb_s_after")
    _no_serve_left()


def test_failover(tmp_path):
    rows = _written(tmp_path, "failover", failover.run(quick=True, tiny=True))
    n = failover.TINY.kills
    kills, summary, stops, planned, rss = rows[:n], rows[n], rows[n + 1 : -2], rows[-2], rows[-1]
    assert rss["figure"].startswith("peak RSS") and len(rss) > 1
    assert len(kills) == len(stops) == n
    assert planned["stops"] == n and planned["figure"].startswith("planned stop")
    _positive(planned, "median_s", "max_s", "ratio_median_to_kill")
    for row in kills + stops:
        assert row["killed"] != row["new_leader"]
        _positive(row, "gap_s", "leader_s", "direct_ack_s")
        assert row["leader_s"] <= row["direct_ack_s"]
    assert summary["kills"] == len(kills)
    _positive(
        summary,
        "median_s",
        "p90_s",
        "max_s",
        "election_timeout_max_s",
        "ratio_median_to_election_max",
        "ratio_max_to_election_max",
        "median_leader_s",
        "median_direct_ack_s",
        "acked_appends",
    )
    assert summary["median_s"] <= summary["max_s"]
    _no_serve_left()


def test_membership_smallest(tmp_path):
    from quorumlog.bench import membership

    rows = _by_figure(_written(tmp_path, "membership", membership.run(tiny=True)))
    baseline = rows["longest gap, no change (baseline)"]
    _positive(baseline, "gap_s")
    for figure in ("longest gap, replace the leader (joint)", "longest gap, remove the leader"):
        _positive(rows[figure], "gap_s", "change_s", "ratio_to_election_max")
    promotion = next(r for name, r in rows.items() if name.startswith("add -> promotion"))
    _positive(promotion, "promotion_s", "caught_up_s", "catchup_mb_s", "append_same_mb_s")
    _no_serve_left()


def test_sim_smallest(tmp_path, monkeypatch):
    from quorumlog.bench import sim

    # tests/sim runs every kind, and the elections at 600 partitions; here, that the bench
    # runs a kind and the elections and writes their rows.
    monkeypatch.setattr(sim, "KINDS", sim.KINDS[:1])
    rows = _written(tmp_path, "sim", sim.run(seeds=1, election_partitions=30))
    assert [r["failed"] for r in rows] == [0, 0, 0], "one kind and the elections' two rows"
    assert all(r["seeds"] == 1 for r in rows)
    assert all(
        ("run_elections" if "every group leads" in r["figure"] else "run_seed") in r["replay"]
        for r in rows
    )


def test_scale_smallest(tmp_path):
    from quorumlog.bench import scale

    rows = _by_figure(_written(tmp_path, "scale", scale.run(tiny=True)))
    assert {"record 100 B", "window 1", "window 64", "log grown", "5 nodes"} <= set(rows)
    for row in rows.values():
        _positive(row, "records_s", "mb_s", "p50_ms", "p99_ms", "peak_rss_mb_max")
    assert rows["5 nodes"]["nodes"] == 5
    _no_serve_left()


def test_plots_from_rows(tmp_path):
    from quorumlog.bench.plots import plot

    results = {
        "scale": [
            {"figure": "window 1", "window": 1, "records_s": 10.0},
            {"figure": "window 64", "window": 64, "records_s": 50.0},
            {"figure": "record 100 B", "record_bytes": 100, "mb_s": 1.0},
        ],
        "produce": [{"figure": "w1 quorum", "p50_ms": 1.0, "p99_ms": 2.0}],
        "recovery": [{"figure": "lazy", "timeline": [(0.0, 0, 0), (1.0, 10, 8)]}],
        "failover": [{"figure": "kill 1", "gap_s": 0.5}],
        "vs-nats": [
            {
                "system": s,
                "window": w,
                "records_per_append": n,
                "records_s": 10.0 * w,
                "p50_ms": 1.0,
                "p99_ms": 2.0,
            }
            for s in ("NATS JetStream R3", "quorumlog acks=quorum")
            for w, n in ((1, 1), (64, 1), (64, 64))
        ],
    }
    written = plot(results, str(tmp_path / "run"))
    assert sorted(os.path.basename(p) for p in written) == [
        "run-failover.png",
        "run-produce.png",
        "run-recovery.png",
        "run-scale.png",
        "run-vs-nats.png",
    ]
    assert all(os.path.getsize(p) > 1000 for p in written)


def test_nemesis_smallest_through_the_command_line(tmp_path):
    from click.testing import CliRunner

    from quorumlog.cli.main import main

    out = tmp_path / "new" / "nemesis.jsonl"  # a folder that does not exist yet
    args = ["bench", "nemesis", "--seed", "5", "--faults", "kill-follower", "--steps", "1"]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["scenario"] == "nemesis" and row["seed"] == 5 and row["violations"] == 0
    assert row["faults"] >= 1 and row["lost q/l/n"].startswith("0/")
    details = row["details"]
    assert details["quorum_acked"] > 0 and details["violations"] == []
    assert "nemesis-a/2" in details["partitions"] and "default/0" in details["partitions"]
    assert "--seed 5 --faults kill-follower --steps 1" in details["replay"]
    assert os.path.exists(details["history"])
    bad = CliRunner().invoke(main, ["bench", "nemesis", "--faults", "no-such-fault"])
    assert bad.exit_code == 2 and "kill-leader" in bad.output
    unwritable = str(out / "under-a-file.jsonl")
    bad = CliRunner().invoke(main, ["bench", "sim", "--seeds", "1", "--out", unwritable])
    assert bad.exit_code == 2 and "cannot write the figures" in bad.output
    assert "running" not in bad.output, "refused before any scenario ran"


@pytest.mark.slow
def test_consume_smallest(tmp_path):
    from quorumlog.bench import consume

    rows = _by_figure(_written(tmp_path, "consume", consume.run(tiny=True)))
    _positive(rows["6 plain readers (read loops), 6 partitions"], "records_s")
    for n in (1, 3, 6):
        row = rows[f"stream mode, {n} members, 6 partitions, commit per poll"]
        _positive(row, "records_s", "x_plain_readers")
    (takeover,) = [row for figure, row in rows.items() if figure.startswith("member SIGKILL")]
    _positive(takeover, "median_s")
    _positive(rows["queue mode, 8 members, 1 partition, acked records/s"], "records_s")
    (latency,) = [row for figure, row in rows.items() if figure.startswith("queue mode append")]
    _positive(latency, "p50_ms", "p99_ms", "records")
    (cli,) = [row for figure, row in rows.items() if figure.startswith("quorumlog consume >")]
    _positive(cli, "records_s", "read_loop_records_s", "x_read_loop")
    _no_serve_left()


CPU_FIELDS = ("server_cpu_us_per_record", "client_cpu_us_per_record")


def test_kafka_smallest(tmp_path):
    from quorumlog.bench import kafka

    rows = _by_figure(_written(tmp_path, "kafka", kafka.run(tiny=True)))
    for name, _settings, window, per_call in kafka.CASES:
        ours = rows[f"AsyncClient quorum w{window} x{per_call}"]
        through_kafka = rows[f"confluent-kafka {name} w{window} x{per_call}"]
        for row in (ours, through_kafka):
            _positive(row, "records_s", "p50_ms", "p99_ms", *CPU_FIELDS)
            assert row["errors"] == 0
        _positive(through_kafka, "vs_native", "cpu_vs_native")
        assert len(through_kafka["vs_native_rounds"]) == 1  # one round at this size
    _positive(rows["consume, confluent-kafka Consumer"], "records", "records_s", "vs_native")
    _positive(rows["consume, Client.read loop"], "records_s")
    _no_serve_left()


@pytest.mark.slow
def test_vs_kafka_smallest(tmp_path):
    """Needs java 17+ and Kafka 4.4's jars (make test fetches them with mvn); skipped with
    the scenario's own reason where they are missing."""
    from quorumlog.bench import kafka_java, vs_kafka
    from quorumlog.bench.kafka import CASES

    why = kafka_java.why_unavailable()
    if why is not None:
        (skipped,) = vs_kafka.run(tiny=True)
        assert skipped["skipped"] and skipped["reason"] == why
        pytest.skip(f"bench vs-kafka: {why}")
    rows = _by_figure(_written(tmp_path, "vs-kafka", vs_kafka.run(tiny=True)))
    assert len(rows) == len(CASES) * len(vs_kafka.SYSTEMS)
    for name, _settings, window, per_call in CASES:
        for system, _configs in vs_kafka.SYSTEMS:
            row = rows[f"{system} {name} w{window} x{per_call}"]
            _positive(row, "records_s", "p50_ms", "p99_ms", *CPU_FIELDS)
            assert row["errors"] == 0
        ours = rows[f"{vs_kafka.QUORUMLOG} {name} w{window} x{per_call}"]
        _positive(ours, "vs_kafka", "vs_kafka_fsync", "cpu_vs_kafka")
    # Kafka's brokers too: each one's command line names its server.properties in there.
    _no_serve_left()


def test_vs_nats_smallest(tmp_path):
    """Needs Debian's nats-server on the machine (the scenario itself installs it where it
    may; the suite does not, to stay off the network)."""
    import shutil

    from quorumlog.bench import vs_nats

    if shutil.which("nats-server") is None:
        pytest.skip("nats-server is not installed (quorumlog bench vs-nats installs it)")
    rows = _by_figure(_written(tmp_path, "vs-nats", vs_nats.run(tiny=True)))
    for window, per_call in vs_nats.CASES:
        nats = rows[f"NATS JetStream R3 {per_call} rec/call w{window}"]
        ours = rows[f"quorumlog acks=quorum {per_call} rec/call w{window}"]
        _positive(nats, "records_s", "p50_ms", *CPU_FIELDS)
        _positive(ours, "records_s", "p50_ms", "ratio_to_nats", *CPU_FIELDS)
        assert ours["errors"] == 0
        assert len(ours["ratio_to_nats_rounds"]) == 1  # one round at this size
    threads = rows[f"{vs_nats.CLIENT_SYSTEM} 1 rec/call w{vs_nats.THREADS}"]
    _positive(threads, "records_s", "p50_ms", "ratio_to_async")
    _positive(rows[vs_nats.DISK_FIGURE], "mb_s")
    _positive(rows["quorumlog acks=quorum 64 rec/call w64"], "ratio_to_disk")
    _no_serve_left()


def test_timestamps_smallest(tmp_path):
    from quorumlog.bench import timestamps

    rows = _by_figure(_written(tmp_path, "timestamps", timestamps.run(tiny=True)))
    assert len(rows) == 2
    for row in rows.values():
        _positive(row, "median_ms", "max_ms", "ratio_to_baseline", "steady_append_median_ms")
    _no_serve_left()


@pytest.mark.slow
def test_gray_smallest(tmp_path):
    rows = _by_figure(_written(tmp_path, "gray", gray.run(tiny=True)))
    phases = [r["phase"] for r in rows.values() if "phase" in r]
    assert phases == [
        "healthy",
        "slow disk on a follower",
        "slow disk on the leader",
        "healthy again",
    ]
    for row in rows.values():
        if row.get("acks_s") is not None:
            _positive(row, "acks_s", "ratio")
    assert "slow disk on the leader: median ratio" in rows
    _no_serve_left()


def test_witness_smallest(tmp_path):
    from quorumlog.bench import witness

    rows = _by_figure(_written(tmp_path, "witness", witness.run(tiny=True)))
    full = rows["restore fault tolerance, 5 MB log: full replica (baseline)"]
    tail = rows["restore fault tolerance, 5 MB log: witness + demote"]
    _positive(full, "seconds", "fill_s")
    _positive(tail, "seconds", "ratio_to_baseline", "witness_log_start_offset")
    for figure in ("leader + full follower (baseline)", "leader + witness"):
        _positive(rows[f"commit latency, {figure}"], "p50_ms", "p99_ms", "appends")
    _no_serve_left()


def test_groups_log_smallest(tmp_path):
    from quorumlog.bench import groups_log

    rows = _by_figure(_written(tmp_path, "groups-log", groups_log.run(tiny=True)))
    base = rows["600 commits, snapshots off (baseline)"]
    compacted = rows["600 commits, compacted"]
    for row in (base, compacted):
        _positive(row, "commits", "commits_per_s", "groups_bytes", "takeover_s")
    _positive(compacted, "bytes_ratio_to_baseline", "takeover_ratio_to_baseline")
    _no_serve_left()


def test_rebalance_smallest(tmp_path):
    from quorumlog.bench import rebalance

    assert scenario("rebalance") is rebalance.run
    (row,) = _written(tmp_path, "rebalance", rebalance.run(tiny=True))
    _positive(row, "balanced_s", "leads_s", "replicas_moved", "mb_s", "append_same_mb_s")
    assert row["replicas_moved"] == 9, "node 4 ends with a quarter of the 36 replicas"
    _no_serve_left()


@pytest.mark.slow
def test_soak_smallest(tmp_path):
    """Both variants run their load, sample every node, read its tables and compare its
    heap snapshots (issue 51); flat or not is the machine's to say, not the suite's."""
    from quorumlog.bench import soak

    assert scenario("soak") is soak.run
    rows = _by_figure(_written(tmp_path, "soak", soak.run(minutes=0.1, heap=True)))
    assert set(rows) == {"soak with topic churn", "soak without topic churn"}
    for row in rows.values():
        _positive(row, "acked", "consumed", "growth_worst")
        assert set(row["nodes"]) == {"1", "2", "3"}  # JSON keys
        for node in row["nodes"].values():
            _positive(node, "rss_first_mb", "rss_last_third_median_mb", "growth")
            assert node["tables"]["groups"] >= 4, "status's tables were read"
            grew = node["heap_grew_most"]
            assert len(grew) == soak.HEAP_TOP and all(":" in line["where"] for line in grew)
            assert all(line["kib"] >= 0 for line in grew)
        assert all(len(series) >= 6 for series in row["samples"].values())
    assert rows["soak with topic churn"]["churn_rounds"] >= 1
    _no_serve_left()


def test_compaction_smallest(tmp_path):
    from quorumlog.bench import compaction

    rows = _by_figure(_written(tmp_path, "compaction", compaction.run(tiny=True)))
    for keys in compaction.TINY.keys:
        row = rows[f"a pass over {compaction.TINY.log_mib} MiB, {keys:,} keys"]
        _positive(row, "s", "mb_s", "copy_mb_s", "ratio_to_copy", "records_removed")
        assert row["bytes_after"] < row["bytes_before"]
    (live,) = [row for figure, row in rows.items() if figure.startswith("append latency")]
    _positive(live, "plain_p99_ms", "cleaning_p99_ms", "p99_ratio", "samples")
    _positive(live, "writer_mb_plain", "writer_mb_compacted")
    _no_serve_left()
