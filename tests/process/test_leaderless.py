"""Real processes (issue 45): a partition that lost its leader is shown without one. Three
nodes, a topic of 8 partitions with 2 replicas each (the command warns that 2 survive no
failure), node 3 stopped: within a few seconds `topic describe --json` gives `leader_id`
null for every partition node 3 was a replica of (the leader of its term stepped down, or
was node 3) and a leader for the others, the console's topic page and Kafka's Metadata
(LEADER_NOT_AVAILABLE) say the same, and an append meets exactly that."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient

from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster, free_ports
from tests.process.test_topics import wait_until

TOPIC = "two"
PARTITIONS = 8
SHOWN_WITHIN_S = 10.0  # a few seconds, with room for a loaded machine


def ql(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=60, input=stdin)


@pytest.fixture
def cluster(tmp_path):
    c = ProcessCluster(str(tmp_path), http_ports=free_ports(3), kafka_ports=free_ports(3))
    c.start_all()
    yield c
    c.stop_all()


def described(brokers: str) -> dict[int, dict]:
    out = ql("topic", "-b", brokers, "describe", TOPIC, "--json", "--timeout", "5")
    assert out.returncode == 0, out.stderr
    return {row["partition"]: row for row in map(json.loads, out.stdout.splitlines())}


def console_topic(cluster: ProcessCluster, node_id: int) -> dict[int, dict]:
    url = f"http://127.0.0.1:{cluster.http_ports[node_id - 1]}/api/topics/{TOPIC}"
    with urllib.request.urlopen(url, timeout=20) as response:
        return {row["partition"]: row for row in json.loads(response.read())}


def kafka_leaders(cluster: ProcessCluster, node_id: int) -> dict[int, int]:
    """Each partition's leader as Kafka's Metadata names it (-1: LEADER_NOT_AVAILABLE)."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.kafka_ports[node_id - 1]}"})
    topic = admin.list_topics(topic=TOPIC, timeout=10).topics[TOPIC]
    return {
        p: (-1 if meta.error is not None else meta.leader) for p, meta in topic.partitions.items()
    }


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_partitions_whose_leader_lost_its_quorum_are_shown_without_one(cluster, stop):
    cluster.wait_for_leader()
    made = ql(
        "topic", "-b", cluster.brokers, "create", TOPIC,
        "--partitions", str(PARTITIONS), "--replicas", "2",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    warning = made.stderr.decode()
    assert warning.startswith("warning: 2 replicas survive no failure") and warning.count("\n") == 1
    every = wait_until(
        lambda: (
            (rows := described(cluster.brokers))
            and all(r["leader_id"] is not None for r in rows.values())
            and rows
        ),
        30,
        "a leader for every partition",
    )
    orphaned = {p for p, row in every.items() if 3 in row["replicas"]}
    assert orphaned and orphaned != set(every), every  # 2 of 3 nodes: both kinds, always

    cluster.kill(3, stop)
    brokers = ",".join(cluster.address(n) for n in (1, 2))

    def agreed() -> dict[int, dict] | None:
        rows = described(brokers)
        leaderless = {p for p, row in rows.items() if row["leader_id"] is None}
        return rows if leaderless == orphaned else None

    rows = wait_until(agreed, SHOWN_WITHIN_S, f"partitions {sorted(orphaned)} without a leader")
    for p, row in rows.items():
        assert p in orphaned or row["leader_id"] in row["replicas"], row
    # What an append meets: refused where no leader is shown (after its whole timeout: one
    # second is enough to say it), taken where one is.
    for p in range(PARTITIONS):
        timeout = "1" if p in orphaned else "10"
        out = ql(
            "produce", "-b", brokers, "--topic", TOPIC, "--partition", str(p), "--timeout", timeout,
            stdin=b"after\n",
        )  # fmt: skip
        if p in orphaned:
            assert out.returncode == 1, (p, out.stdout, out.stderr)
        else:
            assert out.returncode == 0, (p, out.stderr)
    # The console's topic page and Kafka's Metadata, asked of either node left, agree.
    for node_id in (1, 2):
        page = wait_until(
            lambda n=node_id: (
                (page := console_topic(cluster, n))
                and {p for p, r in page.items() if r["leader_id"] is None} == orphaned
                and page
            ),
            SHOWN_WITHIN_S,
            f"node {node_id}'s console",
        )
        # The leaders themselves may move meanwhile (the balancer): each is a live replica.
        live = {p: set(rows[p]["replicas"]) - {3} for p in rows if p not in orphaned}
        assert all(page[p]["leader_id"] in live[p] for p in live), (page, rows)
        leaders = wait_until(
            lambda n=node_id: (
                (found := kafka_leaders(cluster, n))
                and {p for p, leader in found.items() if leader < 0} == orphaned
                and found
            ),
            SHOWN_WITHIN_S,
            f"node {node_id}'s Kafka Metadata",
        )
        assert all(leaders[p] in live[p] for p in live), (leaders, rows)


def test_altering_down_to_two_replicas_warns(cluster):
    cluster.wait_for_leader()
    assert ql("topic", "-b", cluster.brokers, "create", "three", "--replicas", "3").stderr == b""
    out = ql("topic", "-b", cluster.brokers, "alter", "three", "--replicas", "2")
    assert out.returncode == 0, out.stderr
    assert b"a majority of 2 is 2" in out.stderr and out.stderr.count(b"\n") == 1
