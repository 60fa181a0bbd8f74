"""The same scenario over TCP and over the memory network: the two are interchangeable."""

import random
from contextlib import asynccontextmanager

import pytest
import trio

from quorumlog.raft.messages import Heartbeat, VoteReply, VoteRequest
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.memory import MemoryNetwork
from quorumlog.transport.messages import ErrorCode, ErrorReply, Role, StatusRequest
from quorumlog.transport.network import ClientConnection, NodeTransport
from quorumlog.transport.tcp import open_connection, open_tcp_transport

SECRET = b"s"


@asynccontextmanager
async def tcp_cluster(handlers):
    async with (
        open_tcp_transport(
            1, "127.0.0.1:0", handlers[1], rng=random.Random(1), secret=SECRET
        ) as one,
        open_tcp_transport(
            2, "127.0.0.1:0", handlers[2], rng=random.Random(2), secret=SECRET
        ) as two,
    ):
        peers = {1: one.listen_addresses[0], 2: two.listen_addresses[0]}
        one.set_peers(peers)
        two.set_peers(peers)

        @asynccontextmanager
        async def connect(node_id):
            async with open_connection(peers[node_id], secret=SECRET) as connection:
                yield connection

        yield {1: one, 2: two}, connect


@asynccontextmanager
async def memory_cluster(handlers):
    network = MemoryNetwork(random.Random(1))
    peers = {1: "memory", 2: "memory"}
    async with (
        network.open_node(1, handlers[1], peers=peers) as one,
        network.open_node(2, handlers[2], peers=peers) as two,
    ):
        yield {1: one, 2: two}, network.connect


@pytest.mark.parametrize("cluster", [tcp_cluster, memory_cluster], ids=["tcp", "memory"])
async def test_raft_and_client_traffic(cluster):
    inbox = {1: [], 2: []}

    def handler_of(node_id):
        async def handler(peer, message):
            match message:
                case VoteRequest():
                    return VoteReply(
                        group=message.group,
                        node_id=node_id,
                        term=message.term,
                        granted=True,
                        pre_vote=message.pre_vote,
                    )
                case StatusRequest():
                    return ErrorReply(
                        ErrorCode.NOT_LEADER, "ask 1", leader_id=1, leader_address="h:1"
                    )
            inbox[node_id].append((peer, message))
            return None

        return handler

    with trio.fail_after(10):
        async with cluster({1: handler_of(1), 2: handler_of(2)}) as (nodes, connect):
            one: NodeTransport = nodes[1]
            two: NodeTransport = nodes[2]
            # One-way: may be refused until the link is up (TCP), never blocks, then arrives.
            while not inbox[2]:
                one.send_nowait(2, Heartbeat(group=1, term=3, leader_id=1, leader_commit=9))
                await trio.sleep(0.01)
            peer, message = inbox[2][0]
            assert message == Heartbeat(group=1, term=3, leader_id=1, leader_commit=9)
            assert (peer.role, peer.node_id) == (Role.PEER, 1)
            # Raft replies travel one-way on the reverse link.
            while not inbox[1]:
                two.send_nowait(
                    1, VoteReply(group=1, node_id=2, term=3, granted=True, pre_vote=False)
                )
                await trio.sleep(0.01)
            assert inbox[1][0][1] == VoteReply(
                group=1, node_id=2, term=3, granted=True, pre_vote=False
            )
            # Pipelined request / reply between nodes.
            async with trio.open_nursery() as nursery:
                for term in range(5):
                    nursery.start_soon(ask_vote, one, term)
            # Clients.
            async with connect(2) as client:
                client: ClientConnection
                reply = await client.request(StatusRequest())
                assert reply == ErrorReply(ErrorCode.NOT_LEADER, "ask 1", 1, "h:1")
            # Not members.
            assert not one.send_nowait(7, Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
            with pytest.raises(ConnectionClosed):
                await one.request(7, StatusRequest())


async def ask_vote(transport, term):
    request = VoteRequest(
        group=1,
        term=term,
        candidate_id=1,
        last_offset=10,
        last_term=2,
        pre_vote=term % 2 == 0,
        transfer=False,
    )
    assert await transport.request(2, request) == VoteReply(
        group=1, node_id=2, term=term, granted=True, pre_vote=term % 2 == 0
    )


@asynccontextmanager
async def tcp_pair_one_way_known(handlers):
    """Node 1 lists node 2; node 2 lists nobody (as a node that is joining)."""
    async with open_tcp_transport(
        2, "127.0.0.1:0", handlers[2], rng=random.Random(2), secret=SECRET
    ) as two:
        peers = {2: two.listen_addresses[0]}
        async with open_tcp_transport(
            1, "127.0.0.1:0", handlers[1], rng=random.Random(1), secret=SECRET, peers=peers
        ) as one:
            yield one, two


@asynccontextmanager
async def memory_pair_one_way_known(handlers):
    network = MemoryNetwork(random.Random(1))
    async with (
        network.open_node(1, handlers[1], peers={2: "memory"}) as one,
        network.open_node(2, handlers[2]) as two,
    ):
        yield one, two


@pytest.mark.parametrize(
    "pair", [tcp_pair_one_way_known, memory_pair_one_way_known], ids=["tcp", "memory"]
)
async def test_a_node_answers_a_peer_it_has_no_link_to(pair):
    inbox = {1: [], 2: []}

    def handler_of(node_id):
        async def handler(peer, message):
            if isinstance(message, StatusRequest):
                return ErrorReply(ErrorCode.UNKNOWN, f"from {node_id}")
            inbox[node_id].append((peer.node_id, message))
            return None

        return handler

    with trio.fail_after(10):
        async with pair({1: handler_of(1), 2: handler_of(2)}) as (one, two):
            assert not two.send_nowait(
                1, Heartbeat(group=1, term=1, leader_id=2, leader_commit=0)
            )  # 1 has not reached 2
            while not inbox[2]:
                one.send_nowait(2, Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
                await trio.sleep(0.01)
            assert two.send_nowait(
                1, VoteReply(group=1, node_id=2, term=1, granted=True, pre_vote=False)
            )
            while not inbox[1]:
                await trio.sleep(0.01)
            assert inbox[1] == [
                (2, VoteReply(group=1, node_id=2, term=1, granted=True, pre_vote=False))
            ]
            assert await two.request(1, StatusRequest()) == ErrorReply(ErrorCode.UNKNOWN, "from 1")
