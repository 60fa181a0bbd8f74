"""`quorumlog demo`: a guided tour that checks what it shows.

Starts a 3-node cluster in a temporary folder, appends 100,000 records with each acks
level and reads them back, kills the leader with SIGKILL, shows the new leader taking
appends, restarts the old leader and shows it catch up, then checks that every
acknowledged record is present exactly once at its offset, and finally creates a topic of
three partitions and shows keyed records landing by key. Exits 0 only if every check held.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.client import Client
from quorumlog.client.protocol import Record

RECORDS_PER_LEVEL = 100_000
RECORDS_PER_APPEND = 1_000
RECORDS_AFTER_FAILOVER = 20_000
VALUE_BYTES = 100


@dataclass
class Tour:
    console: Console
    checks: list[tuple[str, bool]] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)
    acked: dict[int, bytes] = field(default_factory=dict)  # quorum-acknowledged records

    def check(self, what: str, ok: bool) -> bool:
        self.checks.append((what, ok))
        self.console.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'}  {what}")
        return ok

    def figure(self, what: str, value: str) -> None:
        self.figures.append((what, value))
        self.console.print(f"  {what}: [bold]{value}[/]")


def run_demo(records_per_level: int = RECORDS_PER_LEVEL) -> bool:
    console = Console()
    tour = Tour(console)
    with tempfile.TemporaryDirectory(prefix="quorumlog-demo-") as root:
        cluster = ProcessCluster(root)
        try:
            _tour(cluster, tour, records_per_level)
        except Exception as exc:  # the report must come out whatever happened
            tour.check(f"the tour ran to the end ({type(exc).__name__}: {exc})", False)
        finally:
            cluster.stop_all()
    _report(tour)
    return all(ok for _, ok in tour.checks)


def _value(level: str, i: int) -> bytes:
    return (b"%s-%07d-" % (level.encode(), i)).ljust(VALUE_BYTES, b".")


def _tour(cluster: ProcessCluster, tour: Tour, per_level: int) -> None:
    console = tour.console
    console.rule("1. a 3-node cluster on 127.0.0.1")
    cluster.start_all()
    leader = cluster.wait_for_leader()
    tour.check(f"node {leader} was elected leader; brokers {cluster.brokers}", True)

    with Client(cluster.brokers, timeout=15) as client:
        console.rule(f"2. {per_level:,} records with each acks level")
        for level in ("quorum", "leader", "none"):
            start = time.perf_counter()
            for first in range(0, per_level, RECORDS_PER_APPEND):
                values = [
                    _value(level, i)
                    for i in range(first, min(per_level, first + RECORDS_PER_APPEND))
                ]
                offset = client.append(values, acks=level)
                if level == "quorum":
                    tour.acked.update(zip(range(offset, offset + len(values)), values, strict=True))
            seconds = time.perf_counter() - start
            tour.figure(
                f"acks={level}",
                f"{per_level / seconds:,.0f} records/s ({per_level * VALUE_BYTES / seconds / 1e6:.1f} MB/s)",
            )
        _wait_committed(client)
        found = _read_all(client)
        values = set(found.values())
        for level in ("quorum", "leader", "none"):
            present = sum(_value(level, i) in values for i in range(per_level))
            tour.check(
                f"all {per_level:,} acks={level} records read back ({present:,} found)",
                present == per_level,
            )

        console.rule("3. kill -9 the leader while appending")
        killed_at = time.monotonic()
        cluster.kill(leader)
        appended = 0
        first_ack_s = None
        while appended < RECORDS_AFTER_FAILOVER:
            values = [_value("failover", appended + i) for i in range(RECORDS_PER_APPEND)]
            offset = client.append(values)
            first_ack_s = first_ack_s or time.monotonic() - killed_at
            tour.acked.update(zip(range(offset, offset + len(values)), values, strict=True))
            appended += len(values)
        new_leader = cluster.wait_for_leader()
        tour.check(f"node {new_leader} took over from node {leader}", new_leader != leader)
        tour.figure("first acknowledged append after the kill", f"{first_ack_s * 1000:.0f} ms")

        console.rule(f"4. restart node {leader} and watch it catch up")
        restarted_at = time.monotonic()
        cluster.start(leader)
        statuses = cluster.wait_converged(timeout_s=60)
        tour.figure(f"node {leader} caught up", f"in {time.monotonic() - restarted_at:.1f} s")
        ends = {s["commit_offset"] for s in statuses.values()}
        tour.check(f"all nodes hold the same committed log (end offset {ends.pop()})", not ends)

        console.rule("5. no acknowledged record lost")
        found = _read_all(client)
        lost = sum(found.get(offset) != value for offset, value in tour.acked.items())
        tour.check(
            f"{len(tour.acked):,} quorum-acknowledged records at their offsets ({lost} lost)",
            lost == 0,
        )
        tour.check("no record written twice", len(set(found.values())) == len(found))
        _topic_tour(client, tour)


def _topic_tour(client: Client, tour: Tour) -> None:
    tour.console.rule("6. a topic of 3 partitions, records spread by key")
    start = time.perf_counter()
    client.create_topic("orders", partitions=3, replicas=3)
    tour.figure(
        "topic orders created, every partition led", f"in {time.perf_counter() - start:.2f} s"
    )
    keys = [b"customer-%d" % i for i in range(30)]
    for i in range(300):
        key = keys[i % len(keys)]
        client.append([Record(b"order-%d" % i, key=key)], topic="orders")
    where: dict[bytes, set[int]] = {}
    total = 0
    for partition in range(3):
        records = client.read(0, 1000, topic="orders", partition=partition)
        total += len(records)
        for r in records:
            where.setdefault(r.key, set()).add(r.partition)
        tour.figure(f"orders partition {partition}", f"{len(records)} records")
    tour.check(f"all 300 keyed records read back ({total} found)", total == 300)
    tour.check(
        "each key's records all in one partition",
        all(len(parts) == 1 for parts in where.values()),
    )


def _wait_committed(client: Client) -> None:
    """acks=leader/none answer early: wait until what they wrote is committed."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        statuses = [s for s in client.status() if s.get("role") == "leader"]
        if statuses and statuses[0]["commit_offset"] >= statuses[0]["dirty_offset"]:
            return
        time.sleep(0.1)


def _read_all(client: Client) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    offset = client.start_offset()
    while records := client.read(offset, 50_000):
        found.update((r.offset, r.value) for r in records)
        offset = records[-1].offset + 1
    return found


def _report(tour: Tour) -> None:
    table = Table(title="quorumlog demo")
    table.add_column("what")
    table.add_column("result")
    for i, (what, value) in enumerate(tour.figures):
        table.add_row(what, value, end_section=i == len(tour.figures) - 1)
    for what, ok in tour.checks:
        table.add_row(what, "[green]ok[/]" if ok else "[red]FAILED[/]")
    tour.console.print(table)
