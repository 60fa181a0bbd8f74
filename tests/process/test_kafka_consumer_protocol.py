"""Real processes: Kafka's consumer group protocol (KIP-848, `group.protocol=consumer`)
on quorumlog's coordinators, with confluent-kafka: members share a topic's partitions as
the coordinator's assignor says, a member that leaves or is killed hands its partitions
over, and committed offsets are where a later member resumes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer

from quorumlog import Record
from quorumlog.bench import kafka_java
from quorumlog.bench.kafka_java import CONSOLE_CONSUMER, CONSUMER_GROUPS, run_tool
from quorumlog.cli.localcluster import ProcessCluster
from tests.process.kafka_support import kafka_cluster
from tests.process.test_topics import wait_until

PARTITIONS = 4
SESSION_TIMEOUT_S = 6
# Kafka's defaults are 5 s and 45 s; shorter here so that a test takes seconds.
NODE_ENV = {
    "QUORUMLOG_CONSUMER_HEARTBEAT_INTERVAL_MS": "500",
    "QUORUMLOG_CONSUMER_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_S * 1000),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-kip848")), NODE_ENV)


def fill(cluster: ProcessCluster, topic: str, per_partition: int) -> set[bytes]:
    with cluster.client(timeout=30) as c:
        c.create_topic(topic, partitions=PARTITIONS, replicas=3)
        values = set()
        for p in range(PARTITIONS):
            batch = [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(per_partition)]
            c.append([Record(v) for v in batch], topic=topic, partition=p)
            values |= set(batch)
    return values


def member_config(cluster: ProcessCluster, group: str) -> dict:
    return {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }


class Member:
    """A confluent-kafka consumer of the consumer protocol and what it has read."""

    def __init__(self, cluster: ProcessCluster, group: str, topic: str):
        self.consumer = Consumer(member_config(cluster, group))
        self.consumer.subscribe([topic])
        self.seen: set[bytes] = set()

    def poll(self) -> None:
        message = self.consumer.poll(0.1)
        if message is not None and message.error() is None:
            self.seen.add(message.value())

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def test_two_members_share_and_the_one_left_gets_all_when_the_other_closes(cluster):
    written = fill(cluster, "kip848-shared", per_partition=10)
    members = [Member(cluster, "kip848-shared", "kip848-shared") for _ in range(2)]

    def balanced() -> bool:
        for m in members:
            m.poll()
        first, second = (m.partitions() for m in members)
        return len(first) == len(second) == PARTITIONS // 2 and not first & second

    try:
        wait_until(balanced, 30, "two members with two partitions each")
        members[0].consumer.close()  # leaves (epoch -1): the other gets every partition

        def taken_over() -> bool:
            members[1].poll()
            return members[1].partitions() == set(range(PARTITIONS))

        wait_until(taken_over, 30, "the remaining member with every partition")
        deadline = time.monotonic() + 30
        while members[0].seen | members[1].seen != written and time.monotonic() < deadline:
            members[1].poll()
        assert members[0].seen | members[1].seen == written
    finally:
        members[1].consumer.close()


KILLED_MEMBER = """
import sys
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                     "group.protocol": "consumer", "enable.auto.commit": False})
consumer.subscribe([sys.argv[3]])
while True:
    consumer.poll(0.1)
    print(len(consumer.assignment()), flush=True)
"""


def test_a_killed_member_loses_its_partitions_within_the_session_timeout(cluster):
    fill(cluster, "kip848-killed", per_partition=1)
    survivor = Member(cluster, "kip848-killed", "kip848-killed")
    doomed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_MEMBER,
            cluster.kafka_bootstrap,
            "kip848-killed",
            "kip848-killed",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:

        def shared() -> bool:
            survivor.poll()
            return len(survivor.partitions()) == PARTITIONS // 2

        wait_until(shared, 30, "the survivor with half the partitions")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        killed_at = time.monotonic()

        def taken_over() -> bool:
            survivor.poll()
            return survivor.partitions() == set(range(PARTITIONS))

        wait_until(taken_over, SESSION_TIMEOUT_S + 5, "the survivor with every partition")
        assert time.monotonic() - killed_at >= SESSION_TIMEOUT_S - 1  # by the timeout, not before
    finally:
        doomed.kill()
        doomed.wait()
        survivor.consumer.close()


def test_committed_offsets_are_where_the_next_member_resumes(cluster):
    written = fill(cluster, "kip848-commits", per_partition=5)
    first = Member(cluster, "kip848-commits", "kip848-commits")
    try:
        deadline = time.monotonic() + 30
        while first.seen != written and time.monotonic() < deadline:
            first.poll()
        assert first.seen == written
        first.consumer.commit(asynchronous=False)
    finally:
        first.consumer.close()
    with cluster.client(timeout=30) as c:
        rows = c.describe_group("kip848-commits")["partitions"]
        assert sorted(r["committed"] for r in rows) == [5] * PARTITIONS
        for p in range(PARTITIONS):
            c.append([Record(b"late-%d" % p)], topic="kip848-commits", partition=p)
    second = Member(cluster, "kip848-commits", "kip848-commits")
    try:
        late = {b"late-%d" % p for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while second.seen != late and time.monotonic() < deadline:
            second.poll()
        end = time.monotonic() + 1
        while time.monotonic() < end:
            second.poll()
        assert second.seen == late  # nothing committed is read again
    finally:
        second.consumer.close()


def java_tool(cluster: ProcessCluster, main_class: str, *args: str) -> str:
    """A Kafka 4.4 tool's output; it must exit 0."""
    done = run_tool(main_class, ["--bootstrap-server", cluster.kafka_bootstrap, *args], 90)
    assert done.returncode == 0, f"{main_class} {args} exited {done.returncode}:\n{done.stderr}"
    return done.stdout + done.stderr


def test_kafka_java_console_consumer_of_the_consumer_protocol_and_its_describe(cluster):
    why = kafka_java.why_unavailable()
    if why is not None:
        pytest.skip(f"Kafka's Java tools are not available: {why}")
    written = fill(cluster, "kip848-java", per_partition=5)
    out = java_tool(
        cluster,
        *(CONSOLE_CONSUMER, "--topic", "kip848-java", "--group", "kip848-java"),
        *("--consumer-property", "group.protocol=consumer", "--from-beginning"),
        *("--max-messages", str(len(written)), "--timeout-ms", "30000"),
    )
    assert f"Processed a total of {len(written)} messages" in out, out
    assert {line.encode() for line in out.splitlines()} >= written
    rows = table(java_tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "kip848-java"))
    assert sorted(
        (r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"]) for r in rows
    ) == [(str(p), "5", "0", "-") for p in range(PARTITIONS)], (
        rows
    )  # committed as the consumer closed, and no member left

    # A live member of the consumer protocol, as the tool describes it.
    live = subprocess.Popen(
        kafka_java.java_command(
            CONSOLE_CONSUMER,
            [
                *("--bootstrap-server", cluster.kafka_bootstrap, "--topic", "kip848-java"),
                *("--group", "kip848-java", "--consumer-property", "group.protocol=consumer"),
                *("--consumer-property", "client.id=kip848-live"),
            ],
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def member_rows() -> list[dict[str, str]]:
            args = ("--describe", "--group", "kip848-java", "--members", "--verbose")
            return table(java_tool(cluster, CONSUMER_GROUPS, *args))

        wait_until(lambda: len(member_rows()) == 1, 60, "the live member described")
        (member,) = member_rows()
        assert (member["HOST"], member["CLIENT-ID"], member["#PARTITIONS"]) == (
            "/127.0.0.1",
            "kip848-live",
            "4",
        ), member
        assert member["CURRENT-ASSIGNMENT"] == member["TARGET-ASSIGNMENT"] == "kip848-java:0,1,2,3"
        assert member["CURRENT-EPOCH"] == member["TARGET-EPOCH"], member
        args = ("--describe", "--group", "kip848-java", "--state", "--verbose")
        (state,) = table(java_tool(cluster, CONSUMER_GROUPS, *args))
        assert (state["ASSIGNMENT-STRATEGY"], state["STATE"], state["#MEMBERS"]) == (
            "uniform",
            "Stable",
            "1",
        ), state
    finally:
        live.kill()
        live.wait()


def table(output: str) -> list[dict[str, str]]:
    """The rows of a kafka-consumer-groups table, by column name."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    header = next(i for i, words in enumerate(lines) if words and words[0] == "GROUP")
    return [
        dict(zip(lines[header], words, strict=True))
        for words in lines[header + 1 :]
        if len(words) == len(lines[header])
    ]
