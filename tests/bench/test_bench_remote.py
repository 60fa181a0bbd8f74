"""`quorumlog bench produce|consume|e2e -b BROKERS` (and `--kafka`) as a user runs it: a
cluster started beforehand, the command as a subprocess with a short --duration, its last
line parsed as JSON, and the records it says it wrote read back. No timing assertions."""

from __future__ import annotations

import json
import math
import random
import subprocess

import pytest

from quorumlog.bench.histogram import RELATIVE_ERROR, LatencyHistogram
from quorumlog.bench.workload import percentile
from quorumlog.cli.localcluster import QUORUMLOG, free_ports
from tests.process.kafka_support import kafka_cluster
from tests.process.test_kafka import serves_metadata
from tests.process.test_topics import wait_until

FIGURES = ("records_per_s", "MB_per_s", "p50_ms", "p99_ms", "p999_ms")
RUN_TIMEOUT_S = 90


def test_merged_histograms_are_the_histogram_of_every_sample():
    rng = random.Random(5)
    parts = [[rng.lognormvariate(-6, 1.5) for _ in range(2000)] for _ in range(4)]
    merged = LatencyHistogram()
    for part in parts:
        h = LatencyHistogram()
        for x in part:
            h.add(x)
        merged.merge(h)
    every = sorted(x for part in parts for x in part)
    assert merged.count == len(every)
    assert merged.max_s == every[-1]
    for q in (50, 99, 99.9, 100):
        exact = percentile(every, q)
        assert math.isclose(merged.quantile_s(q / 100), exact, rel_tol=RELATIVE_ERROR * 1.01)
    assert LatencyHistogram().quantile_s(0.5) is None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = kafka_cluster(str(tmp_path_factory.mktemp("bench-remote")))
    c = next(started)
    try:
        # librdkafka's admin client needs a controller in Metadata (test_kafka.py).
        wait_until(lambda: all(serves_metadata(c, i) for i in c.ids), 30, "Kafka metadata")
        yield c
    finally:
        started.close()  # stops the cluster


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*QUORUMLOG, "bench", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def figures(run: subprocess.CompletedProcess) -> dict:
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stdout.strip().splitlines()
    assert any(line.startswith("[") and "rec/s" in line for line in lines), "progress lines"
    row = json.loads(lines[-1])
    for name in FIGURES:
        assert isinstance(row[name], int | float) and row[name] > 0, (name, row)
    assert row["records"] > 0
    return row


def records_in(cluster, topic: str) -> int:
    """Every record of the topic, read back through the public Client."""
    count = 0
    with cluster.client(timeout=30) as client:
        for p in range(client.topics()[topic]):
            offset = client.start_offset(topic, p)
            while records := client.read(offset, 10_000, topic=topic, partition=p):
                count += len(records)
                offset = records[-1].offset + 1
    return count


def test_produce_with_two_producer_processes_writes_what_it_counts(cluster):
    row = figures(
        bench("produce", "-b", cluster.brokers, "--topic", "p2", "--partitions", "2",
              "--producers", "2", "--records", "4", "--window", "2", "--duration", "1")
    )  # fmt: skip
    assert (row["workload"], row["client"], row["producers"]) == ("produce", "quorumlog", 2)
    # Besides the counted records, each producer's warm-up append (one record).
    assert records_in(cluster, "p2") == row["records"] + 2


def test_open_loop_produce(cluster):
    row = figures(
        bench("produce", "-b", cluster.brokers, "--topic", "open", "--rate", "200",
              "--duration", "1", "--acks", "leader")
    )  # fmt: skip
    assert row["rate"] == 200 and row["window"] is None
    assert records_in(cluster, "open") == row["records"] + 1


def test_consume_fills_an_empty_topic_then_reads_all_of_it(cluster):
    run = bench("consume", "-b", cluster.brokers, "--topic", "c", "--partitions", "2",
                "--consumers", "2", "--duration", "1")  # fmt: skip
    row = figures(run)
    assert "is empty: producing" in run.stdout
    assert row["records"] == records_in(cluster, "c")


def test_e2e_consumes_every_record_produced(cluster):
    row = figures(
        bench("e2e", "-b", cluster.brokers, "--topic", "e", "--size", "100", "--duration", "1")
    )
    assert row["records"] == row["records_produced"]
    assert records_in(cluster, "e") == row["records_produced"] + 1


def test_kafka_produce_and_e2e_through_the_kafka_listener(cluster):
    row = figures(
        bench("produce", "--kafka", cluster.kafka_bootstrap, "--topic", "k", "--partitions",
              "2", "--duration", "1")
    )  # fmt: skip
    assert row["client"] == "confluent-kafka"
    assert records_in(cluster, "k") == row["records"] + 1
    row = figures(
        bench("e2e", "-b", cluster.brokers, "--kafka", cluster.kafka_bootstrap, "--topic", "k",
              "--duration", "1")
    )  # fmt: skip
    assert row["records"] == row["records_produced"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("produce", "-b", "127.0.0.1"), 2),
        (("produce", "-b", "127.0.0.1:7001", "--window", "4", "--rate", "10"), 2),
        (("e2e",), 2),
        (("storage", "--size", "10"), 2),
        (("produce", "-b", "127.0.0.1:{port}", "--timeout", "2"), 1),
    ],
)
def test_usage_and_operational_errors_are_one_line(args, code):
    port = str(free_ports(1)[0])
    run = bench(*(a.replace("{port}", port) for a in args))
    assert run.returncode == code, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stderr.startswith("quorumlog: ")
    assert run.stdout == ""
