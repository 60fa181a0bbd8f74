"""The Python clients against a real cluster: windows of appends, bad input, deadlines."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from quorumlog import (
    AsyncClient,
    AuthError,
    CallTimeoutError,
    Client,
    OffsetOutOfRangeError,
    QuorumLogError,
    Record,
    TooLargeError,
)
from quorumlog.cli.localcluster import free_ports
from quorumlog.log.batch import build_batch
from quorumlog.log.records import encode_records
from quorumlog.transport.messages import Acks, AppendRequest, ErrorCode, ErrorReply, Message
from quorumlog.transport.tcp import open_connection

# Each test reads back what it appended, at the offsets it was given: one cluster serves all.
pytestmark = pytest.mark.shares_cluster


async def test_async_client_keeps_a_window_of_appends_in_flight(cluster):
    await trio.to_thread.run_sync(cluster.wait_for_leader)  # a blocking call, off the loop
    offsets: list[int] = []
    async with AsyncClient(cluster.brokers, timeout=20) as c:

        async def one(i: int) -> None:
            offsets.append(await c.append([b"w%03d" % i]))

        async with trio.open_nursery() as nursery:
            for i in range(64):
                nursery.start_soon(one, i)
        assert len(set(offsets)) == 64
        records = await c.read(min(offsets), 1000)
        assert sorted(r.value for r in records) == sorted(b"w%03d" % i for i in range(64))
        assert await c.end_offset(linearizable=True) >= max(offsets)
        statuses = await c.status()
        assert {s["node_id"] for s in statuses} == {1, 2, 3}


def test_details_keys_and_acks_levels(cluster):
    cluster.wait_for_leader()
    with Client(cluster.brokers) as c:
        result = c.append([b"a", Record(key=b"k", value=b"b")], details=True)
        assert result.last_offset == result.first_offset + 1
        assert result.commit_offset >= result.last_offset
        assert result.majority_flushed_offset >= result.last_offset
        assert c.append([b"lazy"], acks="leader") > result.last_offset
        assert c.append([b"fire"], acks="none") is None
        records = c.read(result.first_offset, 2)
        assert [(r.key, r.value) for r in records] == [(None, b"a"), (b"k", b"b")]


def test_bad_input_gets_clear_errors(cluster):
    cluster.wait_for_leader()
    with Client(cluster.brokers, timeout=5) as c:
        with pytest.raises(OffsetOutOfRangeError):
            c.read(-1)
        assert c.read(10**12) == []
        with pytest.raises(QuorumLogError):
            c.append([])
        with pytest.raises(TooLargeError):
            c.append([b"x" * (100 * 1024 * 1024)])
        with pytest.raises(QuorumLogError):
            c.append([b"x"], acks="sometimes")


def test_a_str_from_an_unchecked_client_is_refused_and_nothing_is_stored(cluster):
    """A client that does not check types (before 0.4, or another language's) cannot
    poison a partition: the leader refuses the append with one error."""
    leader = cluster.wait_for_leader()
    with Client(cluster.brokers) as c:
        end = c.append([b"before"]) + 1
        payload, _ = encode_records([(None, "a str", 0, None)], compress=False)
        batch = build_batch(payload, record_count=1)

        async def send() -> Message:
            async with open_connection(cluster.address(leader)) as conn:
                return await conn.request(AppendRequest(batch, Acks.QUORUM, -1, -1))

        refused = trio.run(send)
        assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.PROTOCOL
        assert "its value is str, not bytes" in refused.message
        assert c.append([b"after"]) == end
        assert [r.value for r in c.read(end - 1, 10)] == [b"before", b"after"]


def test_errors_leave_async_with_unwrapped():
    async def main():
        async with AsyncClient("127.0.0.1:1", timeout=0.5, direct=True) as c:
            await c.end_offset()

    with pytest.raises(QuorumLogError):  # not an ExceptionGroup from the client's nursery
        trio.run(main)


def test_unreachable_brokers_fail_within_the_timeout():
    (port,) = free_ports(1)
    start = time.monotonic()
    with Client(f"127.0.0.1:{port}", timeout=1.5) as c, pytest.raises(CallTimeoutError):
        c.append([b"x"])
    assert time.monotonic() - start < 5


def test_wrong_secret_is_refused(tmp_path):
    from quorumlog.cli.localcluster import ProcessCluster

    secret_file = tmp_path / "secret"
    secret_file.write_text("right-secret\n")
    (tmp_path / "c").mkdir()
    cluster = ProcessCluster(str(tmp_path / "c"), size=1)
    cluster.start(1, ["--secret-file", str(secret_file)])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with Client(cluster.brokers, secret=b"right-secret", timeout=2) as c:
                    c.append([b"ok"])
                break
            except CallTimeoutError:
                assert time.monotonic() < deadline
        with Client(cluster.brokers, secret=b"wrong", timeout=5) as c, pytest.raises(AuthError):
            c.append([b"x"])
        with Client(cluster.brokers, timeout=5) as c, pytest.raises(AuthError):
            c.append([b"x"])
    finally:
        cluster.stop_all()


def test_threads_sharing_a_client_each_get_their_own_offsets_partition_and_errors(cluster):
    """Appends from many threads go out together (the loop serves those queued at once in
    one batch per partition), yet each call's result is its own."""
    cluster.wait_for_leader()
    with Client(cluster.brokers, timeout=20) as c:
        c.create_topic("threads", partitions=3)
        results: dict[int, object] = {}

        def append(i: int) -> None:
            records = [Record(key=b"k%d" % (i % 5), value=b"%d-%d" % (i, j)) for j in range(3)]
            try:
                results[i] = c.append(records if i != 7 else [], details=True, topic="threads")
            except QuorumLogError as exc:
                results[i] = exc

        threads = [threading.Thread(target=append, args=(i,)) for i in range(32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert isinstance(results.pop(7), QuorumLogError)  # the empty one, alone
        for i, result in results.items():
            assert result.last_offset == result.first_offset + 2
            records = c.read(result.first_offset, 3, topic="threads", partition=result.partition)
            assert [r.value for r in records] == [b"%d-%d" % (i, j) for j in range(3)]
            assert {r.key for r in records} == {b"k%d" % (i % 5)}
        # The same key, the same partition.
        by_key: dict[int, set[int]] = {}
        for i, result in results.items():
            by_key.setdefault(i % 5, set()).add(result.partition)
        assert all(len(partitions) == 1 for partitions in by_key.values())


async def test_appends_served_together_each_fail_or_succeed_on_their_own(cluster):
    """What the blocking Client's threads get when the loop serves their appends at once
    (AsyncClient._append_each): bad input fails its own call only, and the good calls
    share a batch yet keep their own offsets."""
    await trio.to_thread.run_sync(cluster.wait_for_leader)
    async with AsyncClient(cluster.brokers, timeout=20) as c:
        calls = [
            ([b"one", b"two"], False),
            ([], False),
            (["not bytes"], False),
            ([b"three"], True),
        ]
        results = await c._append_each(calls, "quorum", "default", None)
        with pytest.raises(QuorumLogError, match="nothing to append"):
            results[1].unwrap()
        with pytest.raises(TypeError, match="not str"):
            results[2].unwrap()
        first, details = results[0].unwrap(), results[3].unwrap()
        assert details.first_offset == details.last_offset == first + 2  # one batch
        records = await c.read(first, 3)
        assert [r.value for r in records] == [b"one", b"two", b"three"]
        with pytest.raises(TypeError, match="not str"):
            await c.append(["not bytes"])
