"""The node's client append path: a round's appends share one log append, a retry in the
same round is answered with the first one's offsets, every acks level is answered."""

from __future__ import annotations

import random

import trio

from quorumlog.actors.node.node import Node
from quorumlog.actors.services.storage import open_storage
from quorumlog.log.batch import split_batches
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.records import make_data_batch
from quorumlog.log.wal import run_inline
from quorumlog.raft.settings import RaftSettings
from quorumlog.transport.memory import MemoryNetwork
from quorumlog.transport.messages import Acks, AppendReply, AppendRequest, ErrorReply, Role
from quorumlog.transport.network import ConnectionInfo

CLIENT = ConnectionInfo(role=Role.CLIENT, node_id=None, remote="test:client")


def batch(value: bytes, producer: tuple[int, int] | None = None) -> bytes:
    producer_id, seq = producer if producer is not None else (-1, -1)
    return make_data_batch([(None, value, 0, None)], producer_id=producer_id, producer_seq=seq)


async def one_node(nursery: trio.Nursery) -> tuple[MemoryNetwork, Node]:
    rng = random.Random(1)
    storage = open_storage(
        MemoryFileSystem(),
        "/data",
        node_id=1,
        peers={1: "127.0.0.1:7001"},
        rng=rng,
        run_sync=run_inline,
    )
    node = Node(1, storage, settings=RaftSettings(), rng=rng)
    network = MemoryNetwork(random.Random(2))
    await nursery.start(node.run, lambda handler: network.open_node(1, handler))
    while not node.default_group.view.is_leader or node.default_group.view.commit_offset < 0:
        await trio.sleep(0.05)
    return network, node


async def test_one_round_of_appends_and_a_retry_within_it(autojump_clock):
    async with trio.open_nursery() as nursery:
        _, node = await one_node(nursery)
        requests = [
            AppendRequest(batch(b"a", (7, 0)), Acks.QUORUM, 7, 0),
            AppendRequest(batch(b"b"), Acks.LEADER, -1, -1),
            AppendRequest(batch(b"a", (7, 0)), Acks.QUORUM, 7, 0),  # the retry
            AppendRequest(batch(b"c") + batch(b"d"), Acks.QUORUM, -1, -1),
            AppendRequest(batch(b"e"), Acks.NONE, -1, -1),
        ]
        replies: dict[int, list] = {i: [] for i in range(len(requests))}
        dirty_before = node.log.dirty_offset
        # Taken one after the other with no checkpoint between: one round of the node.
        for i, request in enumerate(requests):
            assert node.take_request(CLIENT, request, replies[i].append)
        with trio.fail_after(5):
            while not all(replies.values()):
                await trio.sleep(0.001)
        assert all(len(r) == 1 and isinstance(r[0], AppendReply) for r in replies.values())
        answer = {i: r[0] for i, r in replies.items()}
        # Offsets count records: the leader's barrier before them took a position only.
        first = node.log.records_before(dirty_before + 1)
        assert (answer[0].first_offset, answer[0].last_offset) == (first, first)
        assert (answer[2].first_offset, answer[2].last_offset) == (first, first)  # not twice
        assert (answer[1].first_offset, answer[1].last_offset) == (first + 1, first + 1)
        assert (answer[3].first_offset, answer[3].last_offset) == (first + 2, first + 3)
        assert answer[4].first_offset is None  # acks=none: answered on receipt
        # a, b, c, d, e: the retry took no offset
        assert node.log.dirty_offset == dirty_before + 5
        assert answer[0].commit_offset >= first
        stamped = [h for h, _ in split_batches(node.log.read(dirty_before + 1, 1 << 20).data)]
        assert [h.producer_id for h in stamped].count(7) == 1
        assert node.stats.appends.total() == len(requests)
        nursery.cancel_scope.cancel()


async def test_appends_over_the_network(autojump_clock):
    async with trio.open_nursery() as nursery:
        network, node = await one_node(nursery)
        async with network.connect(1) as connection:
            replies = []

            async def ask(value: bytes) -> None:
                replies.append(
                    await connection.request(AppendRequest(batch(value), Acks.QUORUM, -1, -1))
                )

            async with trio.open_nursery() as asking:
                for i in range(20):
                    asking.start_soon(ask, b"%d" % i)
        # Record offsets from 0: the barrier at position 0 takes none.
        assert sorted(r.first_offset for r in replies) == list(range(20))
        assert node.default_group.view.commit_offset == 20  # the log's position
        nursery.cancel_scope.cancel()


async def test_bad_batches_are_refused(autojump_clock):
    async with trio.open_nursery() as nursery:
        network, _ = await one_node(nursery)
        async with network.connect(1) as connection:
            bad = await connection.request(AppendRequest(b"garbage", Acks.QUORUM, -1, -1))
            stamped_wrong = await connection.request(
                AppendRequest(batch(b"x", (3, 1)), Acks.QUORUM, 3, 2)
            )
        assert isinstance(bad, ErrorReply) and "bad batch" in bad.message
        assert isinstance(stamped_wrong, ErrorReply)
        nursery.cancel_scope.cancel()
