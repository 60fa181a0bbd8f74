"""`quorumlog bench spark`: a Spark batch read of the log against the Client in one process.

A fresh 3-node cluster is filled with N incompressible 1 KiB records (64 KiB appends, 16 in
flight, acks=quorum). Then, in the same run:

- baseline: one Python process reads all N records with the blocking Client (1 MiB reads
  from the leader), as a consumer would;
- Spark: `spark.read.format("quorumlog")` with master local[2] (two tasks at a time, so
  two cores against the baseline's one), written to the `noop` sink so that every row is
  read and converted but nothing is kept; partitions of `recordsPerPartition` offsets
  (the source's default), read from the replicas in turn.

Each read is timed `runs` times, after one small warm-up read that starts Spark's Python
workers; the rows give the median and the spread. `ratio_to_client` is Spark's median
records/s over the Client's. Session start-up is reported apart: it is paid once per
application, not per read. Needs the `spark` extra (pyspark, pyarrow) and Java 17.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass

import trio

from quorumlog.bench.report import print_table
from quorumlog.bench.workload import (
    ACKS,
    MB,
    RECORD_BYTES,
    closed_loop,
    make_batches,
    running_cluster,
    with_leader,
)
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.client import Client

BATCH_RECORDS = 64  # 64 KiB appends
FILL_WINDOW = 16
WARMUP_RECORDS = 1_000


@dataclass(frozen=True)
class Sizes:
    records: int
    runs: int


FULL = Sizes(1_000_000, runs=3)
QUICK = Sizes(100_000, runs=3)
TINY = Sizes(5_000, runs=1)


def _fill(cluster: ProcessCluster, records: int) -> tuple[int, int]:
    """Append `records` records; returns the [start, end) offsets that hold them."""
    batches = make_batches(BATCH_RECORDS)
    appends = max(1, records // BATCH_RECORDS)

    async def fill(address: str) -> None:
        await closed_loop(
            address, batches, BATCH_RECORDS, ACKS["quorum"], FILL_WINDOW, total_appends=appends
        )

    with_leader(cluster, lambda address: trio.run(fill, address))
    with cluster.client() as client:
        return client.start_offset(), client.end_offset(linearizable=True) + 1


def _client_read(address: str, start: int, end: int) -> tuple[int, float]:
    """(records, seconds) of reading [start, end) with one Client, from the leader."""
    count = 0
    offset = start
    began = time.perf_counter()
    with Client(address, timeout=60.0, direct=True) as client:
        while offset < end:
            records = client.read(offset, 10_000)
            if not records:
                break
            count += len(records)
            offset = records[-1].offset + 1
    return count, time.perf_counter() - began


def _spark_read(spark, brokers: str, start: int, end: int) -> tuple[int, float]:
    df = (
        spark.read.format("quorumlog")
        .option("brokers", brokers)
        .option("startingOffset", str(start))
        .option("endingOffset", str(end))
        .load()
    )
    began = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return df.rdd.getNumPartitions(), time.perf_counter() - began


def _summary(figure: str, records: int, seconds: list[float], **extra) -> dict:
    rates = [records / s for s in seconds]
    return {
        "figure": figure,
        "records": records,
        "runs": len(seconds),
        "records_s": statistics.median(rates),
        "records_s_min": min(rates),
        "records_s_max": max(rates),
        "mb_s": statistics.median(rates) * RECORD_BYTES / MB,
        **extra,
    }


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    try:
        from quorumlog.spark import local_session
    except ImportError as exc:  # `bench all` on an install without the extra goes on
        return [{"figure": "skipped", "reason": f"needs the spark extra: {exc}"}]
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return [{"figure": "skipped", "reason": "needs Java 17 (java on PATH or JAVA_HOME)"}]

    sizes = TINY if tiny else QUICK if quick else FULL
    with running_cluster("spark") as cluster:
        start, end = _fill(cluster, sizes.records)
        leader = cluster.address(cluster.wait_for_leader())
        client_runs = [_client_read(leader, start, end) for _ in range(sizes.runs)]
        count = client_runs[0][0]
        assert all(c == count for c, _ in client_runs), "every read saw the same records"

        from pyspark.sql import SparkSession

        owned = SparkSession.getActiveSession() is None  # else a caller's (tests): keep it
        began = time.perf_counter()
        spark = local_session("quorumlog-bench", fast_start=False)
        session_s = time.perf_counter() - began
        try:
            _spark_read(spark, cluster.brokers, start, start + WARMUP_RECORDS)
            spark_runs = [
                _spark_read(spark, cluster.brokers, start, end) for _ in range(sizes.runs)
            ]
            read_count = spark.read.format("quorumlog").option("brokers", cluster.brokers)
            read_count = read_count.option("startingOffset", str(start))
            read_count = read_count.option("endingOffset", str(end)).load().count()
        finally:
            if owned:
                spark.stop()
    assert read_count == count, f"Spark read {read_count} records, the Client {count}"

    baseline = _summary("Client read, 1 process", count, [s for _, s in client_runs])
    spark_row = _summary(
        "Spark batch read, local[2]",
        count,
        [s for _, s in spark_runs],
        partitions=spark_runs[0][0],
        ratio_to_client=0.0,
    )
    spark_row["ratio_to_client"] = spark_row["records_s"] / baseline["records_s"]
    return [
        spark_row,
        baseline,
        {"figure": "SparkSession start, local[2]", "session_s": session_s, "reused": not owned},
    ]


if __name__ == "__main__":
    started = time.perf_counter()
    print_table("bench spark", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
    print(f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
