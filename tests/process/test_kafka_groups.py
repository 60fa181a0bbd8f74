"""Real processes: Kafka consumer groups (the classic protocol) on quorumlog's
coordinators. Members of kafka-python, confluent-kafka and aiokafka share a group's
partitions, commit, and a later member resumes from the committed offsets, which are the
same positions `group describe` shows."""

from __future__ import annotations

import asyncio
import time
import warnings

import pytest
from confluent_kafka import Consumer

from quorumlog import Record
from quorumlog.cli.localcluster import ProcessCluster
from tests.process.kafka_support import kafka_cluster
from tests.process.test_topics import wait_until

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaProducer

PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-groups")))


def fill(cluster: ProcessCluster, topic: str, per_partition: int) -> set[bytes]:
    with cluster.client(timeout=30) as c:
        c.create_topic(topic, partitions=PARTITIONS, replicas=3)
        values = set()
        for p in range(PARTITIONS):
            batch = [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(per_partition)]
            c.append([Record(v) for v in batch], topic=topic, partition=p)
            values |= set(batch)
    return values


def confluent_member(cluster: ProcessCluster, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )


def poll_values(consumers: list[Consumer], want: int, timeout_s: float = 30.0) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        for consumer in consumers:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                out.append(message.value())
    return out


def test_a_group_commits_and_the_next_member_of_any_client_resumes_there(cluster):
    written = fill(cluster, "kg-events", per_partition=30)
    first = confluent_member(cluster, "kg")
    first.subscribe(["kg-events"])
    seen = poll_values([first], len(written))
    assert sorted(seen) == sorted(written)
    first.commit(asynchronous=False)
    first.close()  # leaves the group

    with cluster.client(timeout=30) as c:
        rows = c.describe_group("kg")["partitions"]
        assert {(r["topic"], r["partition"]) for r in rows} == {
            ("kg-events", p) for p in range(PARTITIONS)
        }
        assert all(r["committed"] == r["next_offset"] == r["end"] + 1 for r in rows), rows

    # New records through kafka-python's idempotent producer; an aiokafka member of the
    # same group reads exactly those: nothing committed is delivered again.
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, acks="all")
    fresh = {b"fresh-%d" % i for i in range(20)}
    for value in sorted(fresh):
        producer.send("kg-events", value)
    producer.flush()
    producer.close()

    async def resume() -> list[bytes]:
        member = AIOKafkaConsumer(
            "kg-events",
            bootstrap_servers=cluster.kafka_bootstrap,
            group_id="kg",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await member.start()
        try:
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < len(fresh) and time.monotonic() < deadline:
                batches = await member.getmany(timeout_ms=500)
                got += [m.value for messages in batches.values() for m in messages]
            await member.commit()
            more = await member.getmany(timeout_ms=1000)
            return got + [m.value for messages in more.values() for m in messages]
        finally:
            await member.stop()

    assert sorted(asyncio.run(resume())) == sorted(fresh)


def test_members_share_the_partitions_and_a_leaver_hands_its_own_over(cluster):
    written = fill(cluster, "kg-shared", per_partition=10)
    members = [confluent_member(cluster, "kg-shared") for _ in range(2)]
    for member in members:
        member.subscribe(["kg-shared"])
    seen: set[bytes] = set()

    def poll(member: Consumer) -> None:
        message = member.poll(0.1)
        if message is not None and message.error() is None:
            seen.add(message.value())

    try:

        def balanced() -> bool:
            for m in members:
                poll(m)
            parts = [{tp.partition for tp in m.assignment()} for m in members]
            return all(len(p) == PARTITIONS // 2 for p in parts) and not parts[0] & parts[1]

        wait_until(balanced, 30, "two members with two partitions each")
        members[0].close()  # leaves: the other gets every partition

        def taken_over() -> bool:
            poll(members[1])
            return len(members[1].assignment()) == PARTITIONS

        wait_until(taken_over, 30, "the remaining member with every partition")
        deadline = time.monotonic() + 30
        while seen != written and time.monotonic() < deadline:
            poll(members[1])
        assert seen == written
    finally:
        members[1].close()
