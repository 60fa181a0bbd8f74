"""The Python API's edges against a real node (issue 44): Kafka's acks name, async objects
used outside their `async with`, refusals a program acts on, acks in stream mode, and
unkeyed records spread over partitions."""

from __future__ import annotations

from collections import Counter

import pytest
import trio

from quorumlog import (
    AsyncClient,
    AsyncConsumer,
    Client,
    Consumer,
    GroupActiveError,
    QuorumLogError,
    Record,
    RefusedError,
    TopicExistsError,
    UnknownGroupError,
)
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.partitioner import partition_of_key


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One node is enough: these are the client's edges, not replication."""
    cluster = ProcessCluster(str(tmp_path_factory.mktemp("edges")), size=1)
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        yield cluster
    finally:
        cluster.stop_all()


def test_acks_all_is_taken_as_quorum(node):
    with Client(node.brokers, timeout=20) as c:
        result = c.append([b"all"], acks="all", details=True)
        assert result.commit_offset >= result.last_offset, "acknowledged once committed"
        assert c.append_spread([b"all"], acks="all")[0].last_offset == result.last_offset + 1

    async def main():
        async with AsyncClient(node.brokers, timeout=20) as ac:
            return await ac.append([b"all too"], acks="all")

    assert trio.run(main) == result.last_offset + 2


async def test_an_async_client_outside_its_block_says_to_use_async_with(node):
    c = AsyncClient(node.brokers, timeout=5)
    for call in (c.end_offset(), c.append([b"x"]), c.read(0), c.topics()):
        with pytest.raises(RuntimeError, match=r"not open: use it as `async with AsyncClient"):
            await call
    async with c:
        assert await c.end_offset() >= -1
    for call in (c.end_offset(), c.append([b"x"]), c.status()):
        with pytest.raises(RuntimeError, match="AsyncClient is closed: its `async with` block"):
            await call


async def test_an_async_consumer_outside_its_block_says_to_use_async_with(node):
    cons = AsyncConsumer(node.brokers, group="outside", topics=["default"], timeout=5)
    with pytest.raises(RuntimeError, match="not open: use it as `async with AsyncConsumer"):
        await cons.poll(timeout=0.2)  # was: [] after the whole timeout, silently
    async with cons:
        await cons.poll(timeout=0.2)
    with pytest.raises(RuntimeError, match="AsyncConsumer is closed"):
        await cons.poll(timeout=0.2)
    with pytest.raises(RuntimeError, match="AsyncConsumer is closed"):
        await cons.commit()


def test_refusals_a_program_acts_on_have_their_own_classes(node):
    with Client(node.brokers, timeout=20) as c:
        c.create_topic("taken")
        with pytest.raises(TopicExistsError, match="refused: topic 'taken' exists"):
            c.create_topic("taken")
        with pytest.raises(UnknownGroupError, match="unknown group 'nobody'"):
            c.delete_group("nobody")
        with pytest.raises(RefusedError) as other:
            c.create_topic("bad/name")
        assert type(other.value) is RefusedError
        with Consumer(node.brokers, group="busy", topics=["taken"], timeout=20) as cons:
            cons.poll(timeout=0.1)
            with pytest.raises(GroupActiveError, match="active member"):
                c.delete_group("busy")
        with pytest.raises(QuorumLogError):  # what programs wrote before: still caught
            c.create_topic("taken")


def test_ack_in_stream_mode_says_acks_are_for_queue_mode(node):
    with Client(node.brokers, timeout=20) as c:
        c.create_topic("acked")
        c.append([b"one"], topic="acked")
    with Consumer(node.brokers, group="streamer", topics=["acked"], timeout=20) as cons:
        records = []
        for _ in range(50):
            records += cons.poll(timeout=0.2)
            if records:
                break
        assert [r.value for r in records] == [b"one"]
        for settle in (cons.ack, cons.release):
            with pytest.raises(QuorumLogError, match="for queue mode only") as refused:
                settle(records[0])
            assert "stream mode" in str(refused.value) and "commit()" in str(refused.value)
        cons.commit()  # what stream mode does instead, and the consumer still works


def test_unkeyed_records_spread_record_by_record_and_calls_take_turns(node):
    with Client(node.brokers, timeout=20) as c:
        c.create_topic("two", partitions=2)
        results = c.append_spread([b"u%d" % i for i in range(6)], topic="two")
        assert [(r.partition, r.last_offset - r.first_offset + 1) for r in results] == [
            (0, 3),
            (1, 3),
        ]
        keyed = [Record(b"k%d" % i, key=b"key-%d" % i) for i in range(8)]
        for r in c.append_spread(keyed, topic="two"):
            values = [
                x.value for x in c.read(r.first_offset, 10, topic="two", partition=r.partition)
            ]
            assert values == [
                x.value for x in keyed if partition_of_key(x.key, 2) == r.partition
            ], "each keyed record where its key goes, in order"
        # `append`: one call, one batch, one partition; unkeyed calls take turns.
        placed = Counter(
            c.append([b"a", b"b"], topic="two", details=True).partition for _ in range(6)
        )
        assert placed == {0: 3, 1: 3}
        assert c.append_spread([b"none"], acks="none", topic="two") is None
