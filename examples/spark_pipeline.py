"""A streaming pipeline on quorumlog: JSON events in, per-minute totals out, a leader lost
on the way, and a check that nothing was lost or counted twice.

    python examples/spark_pipeline.py                       # starts its own 3-node cluster
    python examples/spark_pipeline.py --brokers 127.0.0.1:7001,127.0.0.1:7002 --out DIR

1. A producer thread appends JSON events ({"event_id", "ts_ms", "user", "amount"}) with
   acks=quorum, and keeps per-minute totals of what the cluster acknowledged. Event times
   are spread over `--minutes` minutes of event time, however fast they are produced.
2. A Structured Streaming query reads the log (`format("quorumlog")`), parses the JSON,
   counts events and sums amounts per one-minute window (watermark: one minute), and
   appends each closed window to Parquet, with a checkpoint.
3. Half-way through, the quorumlog leader is killed with SIGKILL (with --brokers: leadership
   is moved with transfer-leader, since the nodes are not ours to kill). The producer's
   client and the query's reads carry on against the new leader and the survivors.
4. A last event an hour of event time later closes every window. When the Parquet output
   holds as many events as were acknowledged, the query is stopped and the totals are
   compared minute by minute. Exit 0 when they are equal, 1 when not.

Needs the spark extra (pyspark, pyarrow) and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter

from pyspark.sql import functions as F

from quorumlog import Client
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.spark import local_session

EVENT_SCHEMA = "event_id long, ts_ms long, user string, amount long"
APPEND_EVENTS = 100
MINUTE_MS = 60_000


class Producer(threading.Thread):
    """Appends `events` JSON events at about `rate` a second; counts what was acknowledged."""

    def __init__(self, brokers: str, events: int, rate: float, minutes: int, start_ms: int):
        super().__init__(name="producer", daemon=True)
        self.brokers, self.events, self.rate = brokers, events, rate
        self.span_ms = minutes * MINUTE_MS
        self.start_ms = start_ms
        self.acked = 0
        self.counts: Counter[int] = Counter()  # minute start (ms) -> acknowledged events
        self.amounts: Counter[int] = Counter()
        self.error: Exception | None = None

    def event(self, i: int, rng: random.Random) -> dict:
        ts_ms = self.start_ms + i * self.span_ms // self.events
        return {"event_id": i, "ts_ms": ts_ms, "user": f"u{rng.randrange(50)}", "amount": i % 97}

    def run(self) -> None:
        rng = random.Random(7)
        began = time.monotonic()
        try:
            with Client(self.brokers, timeout=30.0) as client:
                for first in range(0, self.events, APPEND_EVENTS):
                    batch = [self.event(i, rng) for i in range(first, first + APPEND_EVENTS)]
                    batch = batch[: self.events - first]
                    client.append([json.dumps(e).encode() for e in batch], acks="quorum")
                    for e in batch:  # acknowledged: committed on a majority
                        minute = e["ts_ms"] - e["ts_ms"] % MINUTE_MS
                        self.counts[minute] += 1
                        self.amounts[minute] += e["amount"]
                    self.acked += len(batch)
                    ahead_s = self.acked / self.rate - (time.monotonic() - began)
                    if ahead_s > 0:
                        time.sleep(ahead_s)
                # Closes every window: the watermark passes them (this one stays open).
                late = {"event_id": -1, "ts_ms": self.start_ms + self.span_ms + 3_600_000}
                client.append([json.dumps({**late, "user": "end", "amount": 0}).encode()])
        except Exception as exc:  # reported by the main thread
            self.error = exc


def start_query(spark, brokers: str, out: str, starting: int):
    events = (
        spark.readStream.format("quorumlog")
        .option("brokers", brokers)
        .option("startingOffset", str(starting))
        .option("maxRecordsPerTrigger", "2000")
        .load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
        .withColumn("ts", F.timestamp_millis("ts_ms"))
    )
    per_minute = (
        events.withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", "1 minute").alias("w"))
        .agg(F.count("*").alias("events"), F.sum("amount").alias("amount"))
        .select(F.col("w.start").alias("minute"), "events", "amount")
    )
    return (
        per_minute.writeStream.format("parquet")
        .outputMode("append")
        .option("path", os.path.join(out, "per_minute"))
        .option("checkpointLocation", os.path.join(out, "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )


def lose_the_leader(cluster: ProcessCluster | None, brokers: str) -> str:
    with Client(brokers, timeout=30.0) as client:
        statuses = [s for s in client.status() if "role" in s]
        leader = next(s["node_id"] for s in statuses if s["role"] == "leader")
        if cluster is not None:
            cluster.kill(leader, signal.SIGKILL)
            return f"killed the leader, node {leader} (SIGKILL)"
        other = next(s["node_id"] for s in statuses if s["role"] == "follower")
        client.admin("transfer_leader", node_id=other)
        return f"moved leadership from node {leader} to node {other} (transfer-leader)"


def parquet_totals(spark, out: str) -> dict[int, tuple[int, int]]:
    path = os.path.join(out, "per_minute")
    if not os.path.isdir(os.path.join(path, "_spark_metadata")):
        return {}
    # Through the sink's metadata log: only files of committed micro-batches.
    rows = spark.read.schema("minute timestamp, events long, amount long").parquet(path).collect()
    totals: dict[int, tuple[int, int]] = {}
    for r in rows:
        minute = int(r.minute.timestamp() * 1000)
        count, amount = totals.get(minute, (0, 0))
        totals[minute] = (count + r.events, amount + r.amount)
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", help="an existing cluster (default: start one here)")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=2_000.0, help="events per second")
    parser.add_argument("--minutes", type=int, default=5, help="minutes of event time")
    parser.add_argument("--out", help="folder for Parquet and the checkpoint (default: temp)")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()

    out = args.out or tempfile.mkdtemp(prefix="quorumlog-pipeline-")
    cluster = None
    brokers = args.brokers
    if brokers is None:
        os.makedirs(os.path.join(out, "cluster"), exist_ok=True)
        cluster = ProcessCluster(os.path.join(out, "cluster"))
        cluster.start_all()
        cluster.wait_for_leader()
        brokers = cluster.brokers
        print(f"started a 3-node cluster: {brokers}")
    spark = None
    try:
        with Client(brokers, timeout=30.0) as client:
            starting = client.end_offset(linearizable=True) + 1
        spark = local_session("quorumlog-pipeline")
        query = start_query(spark, brokers, out, starting)
        start_ms = int(time.time() * 1000) // MINUTE_MS * MINUTE_MS
        producer = Producer(brokers, args.events, args.rate, args.minutes, start_ms)
        producer.start()
        print(f"producing {args.events} events at {args.rate:g}/s; streaming to {out}")

        while producer.is_alive() and producer.acked < args.events // 2:
            time.sleep(0.05)
        print(f"after {producer.acked} acknowledged events: {lose_the_leader(cluster, brokers)}")
        producer.join()
        if producer.error is not None:
            print(f"the producer failed: {producer.error}", file=sys.stderr)
            return 1
        print(f"producer done: {producer.acked} events acknowledged")

        deadline = time.monotonic() + args.timeout
        totals: dict[int, tuple[int, int]] = {}
        while sum(c for c, _ in totals.values()) < producer.acked:
            if query.exception() is not None:
                print(f"the query failed: {query.exception()}", file=sys.stderr)
                return 1
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)
            totals = parquet_totals(spark, out)
        query.stop()
        commits = os.listdir(os.path.join(out, "checkpoint", "commits"))
        return report(producer, totals, len([f for f in commits if f.isdigit()]))
    finally:
        if spark is not None:
            spark.stop()
        if cluster is not None:
            cluster.stop_all()


def report(producer: Producer, totals: dict[int, tuple[int, int]], batches: int) -> int:
    print(
        f"\n{'minute (UTC)':<20} {'acked':>8} {'parquet':>8} {'amount acked':>13} {'parquet':>10}"
    )
    ok = True
    for minute in sorted(set(producer.counts) | set(totals)):
        acked = (producer.counts[minute], producer.amounts[minute])
        got = totals.get(minute, (0, 0))
        ok &= acked == got
        stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(minute / 1000))
        mark = "" if acked == got else "  <- differs"
        print(f"{stamp:<20} {acked[0]:>8} {got[0]:>8} {acked[1]:>13} {got[1]:>10}{mark}")
    events = sum(c for c, _ in totals.values())
    if ok:
        print(
            f"\nOK: the Parquet totals equal what was acknowledged: {events} events in "
            f"{len(totals)} minutes, read in {batches} micro-batches, across the change of leader"
        )
        return 0
    print(f"\nMISMATCH: {producer.acked} events acknowledged, {events} in Parquet")
    return 1


if __name__ == "__main__":
    sys.exit(main())
