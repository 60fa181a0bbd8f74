"""`quorumlog bench console`: what the web console's pages cost at scale.

Three nodes, each with its console; a topic of PARTITIONS partitions (1,000; --quick 100)
with 1,000 JSON records of about 1 KiB in partition 0, and a consumer group behind on
them. Each page is asked REPEAT times of node 1's console on one kept-alive connection, as
a browser's refreshes would: the figures are its median and p90 time, its size, and the
servers' CPU per request (node 1's and the nodes it asks, together). A page a browser keeps
open costs that CPU every 2 s.
"""

from __future__ import annotations

import http.client
import json
import statistics
import sys
import time

from quorumlog.bench.report import print_table
from quorumlog.bench.resources import CpuMeter
from quorumlog.bench.workload import percentile, running_cluster
from quorumlog.client.client import Client
from quorumlog.client.consumer import Consumer
from quorumlog.client.protocol import Record

TOPIC = "wide"
PARTITIONS = {"full": 1000, "quick": 100, "tiny": 10}
REPEAT = {"full": 20, "quick": 10, "tiny": 3}
RECORDS = 1000
PAGES = [
    "/",
    "/api/cluster",
    "/topics",
    f"/topics/{TOPIC}",
    f"/api/topics/{TOPIC}",
    f"/topics/{TOPIC}/0/messages",
    # here=1: the search stays in partition 0, where _fill put every record (without it
    # the console sends a key search to the partition the key hashes to).
    f"/topics/{TOPIC}/0/messages?key=user-7&here=1",
    "/groups/readers",
    "/metrics",
]


def _fill(brokers: str, partitions: int) -> None:
    with Client(brokers, timeout=120) as c:
        c.create_topic(TOPIC, partitions=partitions)
        body = {"user": "", "items": list(range(100)), "note": "x" * 500}
        records = [
            Record(
                json.dumps({**body, "user": f"user-{i % 50}"}).encode(), key=b"user-%d" % (i % 50)
            )
            for i in range(RECORDS)
        ]
        c.append(records, topic=TOPIC, partition=0)
    with Consumer(brokers, "readers", [TOPIC], timeout=60) as consumer:
        consumer.poll(RECORDS // 2, 10.0)
        consumer.commit()


def _measure(port: int, path: str, repeat: int, meter: CpuMeter) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times, size = [], 0
    try:
        connection.request("GET", path)  # warm: routes and connections learned
        connection.getresponse().read()
        start = meter.read()
        for _ in range(repeat):
            began = time.perf_counter()
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            times.append(time.perf_counter() - began)
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status} {body[:200]!r}")
            size = len(body)
        server_s, _ = meter.since(start)
    finally:
        connection.close()
    times.sort()
    return {
        "figure": f"GET {path}",
        "median_ms": round(statistics.median(times) * 1000, 1),
        "p90_ms": round(percentile(times, 90) * 1000, 1),
        "kb": round(size / 1024, 1),
        "server_cpu_ms_per_request": round(server_s / repeat * 1000, 1),
    }


def _rows(size: str) -> list[dict]:
    partitions = PARTITIONS[size]
    with running_cluster("console", http=True) as cluster:
        _fill(cluster.brokers, partitions)
        meter = CpuMeter(tuple(p.pid for p in cluster.procs.values()))
        rows = [_measure(cluster.http_ports[0], p, REPEAT[size], meter) for p in PAGES]
    for row in rows:
        row["partitions"] = partitions
    return rows


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    return _rows("tiny" if tiny else "quick" if quick else "full")


if __name__ == "__main__":
    print_table("bench console", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
