"""Real processes: consumer groups in queue mode (docs/groups.md, "Queue mode"): members share every partition, a record is leased to one member at a time,
released or expired records go to another, and after `max_deliveries` to `TOPIC.dlq`."""

from __future__ import annotations

import pytest

from quorumlog import Consumer, QuorumLogError, Record
from quorumlog.consumers.state import GROUPS_PARTITIONS, GROUPS_TOPIC, groups_partition
from tests.process.test_topics import wait_until


def fill(cluster, topic: str, partitions: int, per_partition: int) -> set[tuple]:
    with cluster.client(timeout=30) as c:
        c.create_topic(topic, partitions=partitions, replicas=3)
        written = set()
        for p in range(partitions):
            records = [Record(b"%d-%d" % (p, i)) for i in range(per_partition)]
            result = c.append(records, topic=topic, partition=p, details=True)
            written |= {(topic, p, o) for o in range(result.first_offset, result.last_offset + 1)}
    return written


def key(r: Record) -> tuple:
    return (r.topic, r.partition, r.offset)


# The tests marked so use a topic and a group of their own, and stop no node: one cluster
# serves them all.
@pytest.mark.shares_cluster
def test_members_share_every_partition_and_an_acked_record_is_never_delivered_again(cluster):
    written = fill(cluster, "jobs", partitions=2, per_partition=60)
    delivered: list[tuple] = []
    members = [
        Consumer(cluster.brokers, "workers", ["jobs"], mode="queue").__enter__() for _ in range(3)
    ]
    try:
        quiet = 0
        while quiet < 5:
            got = []
            for m in members:
                records = m.poll(25, 0.2)
                for r in records:
                    m.ack(r)
                m.commit()
                got += records
            delivered += [key(r) for r in got]
            quiet = 0 if got else quiet + 1
        assert members[0].assignment() == [("jobs", 0), ("jobs", 1)], "every member, every one"
    finally:
        for m in members:
            m.close()
    assert len(delivered) == len(set(delivered)), "each record leased to one member only"
    assert set(delivered) == written
    with cluster.client() as c:
        rows = c.describe_group("workers")["partitions"]
        last = {p: max(o for _, q, o in written if q == p) for p in (0, 1)}
        assert [r["committed"] > last[r["partition"]] for r in rows] == [True, True]
        ours = [g for g in c.groups() if g["group"] == "workers"]  # the others' are there too
        assert ours == [{"group": "workers", "mode": "queue", "members": 0}]


@pytest.mark.shares_cluster
def test_released_and_expired_records_are_delivered_again_then_dead_lettered(cluster):
    fill(cluster, "work", partitions=1, per_partition=3)
    with Consumer(
        cluster.brokers, "w", ["work"], mode="queue", lease_timeout=1.0, max_deliveries=2
    ) as m:
        r0, r1, r2 = m.poll(10, 5.0)
        m.ack(r2)
        m.release(r0)
        m.commit()
        assert [key(r) for r in m.poll(10, 5.0)] == [key(r0)], "released: back at once"
        # Neither r0 (second delivery) nor r1 is acked: both leases run out. r1 comes back;
        # r0 was delivered twice and goes to the dead letters.
        again = []
        while not again:
            again = m.poll(10, 5.0)
        assert [key(r) for r in again] == [key(r1)]
        m.ack(again[0])
        m.commit()
        with pytest.raises(QuorumLogError, match="not leased"):
            m.ack(again[0])
        assert m.poll(10, 2.0) == [], "nothing left to deliver"
    with cluster.client() as c:
        dead = wait_until(lambda: c.read(0, 10, topic="work.dlq", partition=0), 20, "a dead letter")
        assert [r.value for r in dead] == [r0.value]
        headers = dict(dead[0].headers)
        assert headers["dlq.topic"] == b"work" and headers["dlq.offset"] == b"%d" % r0.offset
        assert headers["dlq.reason"] == b"delivered 2 times" and headers["dlq.group"] == b"w"
        settled = c.describe_group("w")["partitions"][0]["committed"]
        assert settled > max(r0.offset, r1.offset, r2.offset), "every record settled"


def test_acks_survive_a_coordinator_failover(cluster):
    written = fill(cluster, "tasks", partitions=2, per_partition=200)
    partition = groups_partition("crew", GROUPS_PARTITIONS)
    acked: set[tuple] = set()
    delivered: list[tuple] = []

    def work(m: Consumer, rounds: int) -> int:
        got = 0
        for _ in range(rounds):
            records = m.poll(20, 0.5)
            assert not acked & {key(r) for r in records}, "an acked record came back"
            delivered.extend(key(r) for r in records)
            for r in records:
                m.ack(r)
            m.commit()
            acked.update(key(r) for r in records)
            got += len(records)
        return got

    with Consumer(cluster.brokers, "crew", ["tasks"], mode="queue", lease_timeout=2.0) as m:
        work(m, 5)
        with cluster.client(timeout=20) as c:
            coordinator = c.describe_topic(GROUPS_TOPIC)[partition]["leader_id"]
        cluster.kill(coordinator)
        while work(m, 5):
            pass
        wait_until(lambda: work(m, 1) == 0 and acked == written, 30, "every record acked")
    assert acked == written


@pytest.mark.shares_cluster
def test_bad_queue_calls_get_a_clear_error(cluster):
    fill(cluster, "q", partitions=1, per_partition=2)
    with Consumer(cluster.brokers, "qq", ["q"], mode="queue") as m:
        with pytest.raises(QuorumLogError, match="not leased"):
            m.ack(Record(b"forged", offset=1, topic="q", partition=0))
        with (
            pytest.raises(QuorumLogError, match="queue-mode group"),
            Consumer(cluster.brokers, "qq", ["q"], mode="stream"),
        ):
            pass
        with cluster.client() as c:
            reply = c.group_call(
                "lease",
                "qq",
                member=m.member,
                max_records=0,
                lease_timeout_ms=1000,
                max_deliveries=3,
                settle=[["q", 0, "ack", [1]]],
            )
        assert reply["leases"] == [] and "no record in flight" in reply["refused"][0][-1]
        assert len(m.poll(10, 5.0)) == 2, "nothing was lost"
