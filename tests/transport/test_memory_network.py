"""The in-memory network delivers, drops, delays, duplicates, reorders and partitions as told."""

import random

import pytest
import trio

from quorumlog.raft.messages import Heartbeat
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.memory import LinkFaults, MemoryNetwork
from quorumlog.transport.messages import ReadReply, ReadRequest, Role, StatusReply, StatusRequest
from quorumlog.transport.network import ConnectionInfo, Limits

PEERS = {1: "n1", 2: "n2", 3: "n3"}


class Recorder:
    """A node handler that writes down what arrives, when, and from whom."""

    def __init__(self):
        self.arrivals = []

    async def __call__(self, peer, message):
        match message:
            case StatusRequest():
                return StatusReply({"from": peer.node_id})
            case ReadRequest(offset=offset):
                return ReadReply(b"", offset, 0)
        self.arrivals.append((trio.current_time(), peer.node_id, message.term))
        return None

    @property
    def terms(self):
        return [term for _, _, term in self.arrivals]


def beat(term: int) -> Heartbeat:
    return Heartbeat(group=1, term=term, leader_id=1, leader_commit=0)


async def run_cluster(network, scenario, node_ids=(1, 2, 3)):
    recorders = {node_id: Recorder() for node_id in node_ids}
    async with trio.open_nursery() as nursery:
        transports = {}

        async def node(node_id, task_status=trio.TASK_STATUS_IGNORED):
            async with network.open_node(node_id, recorders[node_id], peers=PEERS) as transport:
                transports[node_id] = transport
                task_status.started()
                await trio.sleep_forever()

        for node_id in node_ids:
            await nursery.start(node, node_id)
        await scenario(transports, recorders)
        nursery.cancel_scope.cancel()
    return recorders


async def test_perfect_links_deliver_everything_in_order_through_the_codec(autojump_clock):
    sent = [beat(term) for term in range(100)]

    async def scenario(nodes, recorders):
        for message in sent:
            assert nodes[1].send_nowait(2, message)
        await trio.sleep(1)

    recorders = await run_cluster(MemoryNetwork(random.Random(1)), scenario)
    assert recorders[2].terms == list(range(100))
    assert {sender for _, sender, _ in recorders[2].arrivals} == {1}
    assert recorders[3].arrivals == []


async def test_frames_pass_through_the_real_codec(autojump_clock):
    received = []

    async def keep(peer, message):
        received.append(message)

    network = MemoryNetwork(random.Random(1), limits=Limits(frame_bytes_max=1000))
    async with (
        network.open_node(1, keep, peers=PEERS) as one,
        network.open_node(2, keep, peers=PEERS),
    ):
        message = beat(5)
        one.send_nowait(2, message)
        await trio.sleep(1)
        assert received == [message] and received[0] is not message
        with pytest.raises(ValueError, match="frame_bytes_max"):
            one.send_nowait(2, ReadReply(b"x" * 2000, 0, 0))


async def test_delay_stays_in_its_range(autojump_clock):
    network = MemoryNetwork(random.Random(2))
    network.set_faults(LinkFaults(delay_s_min=0.05, delay_s_max=0.2), src=1, dst=2)

    async def scenario(nodes, recorders):
        for term in range(200):
            nodes[1].send_nowait(2, beat(term))
            nodes[1].send_nowait(3, beat(term))
            await trio.sleep(0.5)  # longer than the delay: each arrival time is its own

    start = trio.current_time()
    recorders = await run_cluster(network, scenario)
    delays = [at - (start + 0.5 * term) for at, _, term in recorders[2].arrivals]
    assert len(delays) == 200
    assert min(delays) >= 0.05 and max(delays) <= 0.2
    assert max(delays) - min(delays) > 0.1  # spread over the range, not one value
    assert all(at - (start + 0.5 * term) < 1e-9 for at, _, term in recorders[3].arrivals)


async def test_drop_probability(autojump_clock):
    network = MemoryNetwork(random.Random(3))
    network.set_faults(LinkFaults(drop_probability=0.3))

    async def scenario(nodes, recorders):
        for term in range(2000):
            assert nodes[1].send_nowait(
                2, beat(term)
            )  # a loss on the wire is not seen by the sender
            await trio.sleep(0.001)
        await trio.sleep(1)

    recorders = await run_cluster(network, scenario)
    delivered = len(recorders[2].arrivals)
    assert 1300 < delivered < 1500
    assert recorders[2].terms == sorted(recorders[2].terms)


async def test_duplication(autojump_clock):
    network = MemoryNetwork(random.Random(4))
    network.set_faults(LinkFaults(duplicate_probability=1.0), src=1)

    async def scenario(nodes, recorders):
        for term in range(10):
            nodes[1].send_nowait(2, beat(term))
            nodes[2].send_nowait(1, beat(term))
        await trio.sleep(1)

    recorders = await run_cluster(network, scenario)
    assert recorders[2].terms == [term for term in range(10) for _ in range(2)]
    assert recorders[1].terms == list(range(10))


@pytest.mark.parametrize("reorder_probability", [0.0, 0.5])
async def test_reordering_only_when_asked(autojump_clock, reorder_probability):
    network = MemoryNetwork(random.Random(5))
    faults = LinkFaults(delay_s_min=0.0, delay_s_max=0.1, reorder_probability=reorder_probability)
    network.set_faults(faults)

    async def scenario(nodes, recorders):
        for term in range(200):
            nodes[1].send_nowait(2, beat(term))
            await trio.sleep(0.005)
        await trio.sleep(1)

    terms = (await run_cluster(network, scenario))[2].terms
    assert sorted(terms) == list(range(200))
    assert (terms != list(range(200))) is (reorder_probability > 0)


async def test_two_way_partition_and_heal(autojump_clock):
    network = MemoryNetwork(random.Random(6))

    async def scenario(nodes, recorders):
        network.partition([1], [2, 3])
        for node_id in (2, 3):
            nodes[1].send_nowait(node_id, beat(1))
            nodes[node_id].send_nowait(1, beat(1))
        nodes[2].send_nowait(3, beat(1))  # within the majority side: fine
        await trio.sleep(1)
        network.heal()
        nodes[1].send_nowait(2, beat(2))
        nodes[2].send_nowait(1, beat(2))
        await trio.sleep(1)

    recorders = await run_cluster(network, scenario)
    assert recorders[1].terms == [2]
    assert recorders[2].terms == [2]
    assert recorders[3].terms == [1]


async def test_one_way_partition(autojump_clock):
    network = MemoryNetwork(random.Random(7))

    async def scenario(nodes, recorders):
        network.partition([1], [2], one_way=True)
        nodes[1].send_nowait(2, beat(1))
        nodes[2].send_nowait(1, beat(1))
        await trio.sleep(1)

    recorders = await run_cluster(network, scenario)
    assert recorders[2].terms == []
    assert recorders[1].terms == [1]


async def test_isolate_and_loss_in_flight(autojump_clock):
    network = MemoryNetwork(random.Random(8))
    network.set_faults(LinkFaults(delay_s_min=1.0, delay_s_max=1.0))

    async def scenario(nodes, recorders):
        nodes[1].send_nowait(2, beat(1))
        await trio.sleep(0.5)
        network.isolate(2)  # the frame is on the wire when the cut happens
        await trio.sleep(1)
        nodes[1].send_nowait(3, beat(2))
        nodes[2].send_nowait(3, beat(2))
        await trio.sleep(2)

    recorders = await run_cluster(network, scenario)
    assert recorders[2].terms == []
    assert [(sender, term) for _, sender, term in recorders[3].arrivals] == [(1, 2)]


async def test_requests_between_nodes_and_from_clients(autojump_clock):
    network = MemoryNetwork(random.Random(9))
    network.set_faults(LinkFaults(delay_s_min=0.01, delay_s_max=0.05))

    async def scenario(nodes, recorders):
        assert await nodes[1].request(2, StatusRequest()) == StatusReply({"from": 1})
        async with network.connect(3) as client:
            assert await client.request(StatusRequest()) == StatusReply({"from": None})
            replies = {}

            async def read(offset):
                replies[offset] = await client.request(ReadRequest(offset, 1))

            async with trio.open_nursery() as pipelined:
                for offset in range(10):
                    pipelined.start_soon(read, offset)
            assert replies == {offset: ReadReply(b"", offset, 0) for offset in range(10)}
        with pytest.raises(ConnectionClosed, match="no connection to peer"):
            await nodes[1].request(4, StatusRequest())
        assert not nodes[1].send_nowait(4, beat(1))
        assert not nodes[1].send_nowait(1, beat(1))  # never to itself
        # A lost reply leaves the requester waiting: its own deadline ends the wait.
        network.partition([2], [1], one_way=True)
        with trio.move_on_after(5) as waited:
            await nodes[1].request(2, StatusRequest())
        assert waited.cancelled_caught

    await run_cluster(network, scenario)


async def test_client_sees_its_node_go(autojump_clock):
    network = MemoryNetwork(random.Random(10))

    async def slow(peer, message):
        await trio.sleep(10)
        return StatusReply({})

    with pytest.raises(ConnectionClosed, match="not on the network"):
        async with network.connect(1):
            pass
    async with trio.open_nursery() as nursery:
        node_scope = trio.CancelScope()

        async def node(task_status=trio.TASK_STATUS_IGNORED):
            with node_scope:
                async with network.open_node(1, slow):
                    task_status.started()
                    await trio.sleep_forever()

        await nursery.start(node)
        async with network.connect(1) as client:

            async def crash_soon():
                await trio.sleep(1)
                node_scope.cancel()

            nursery.start_soon(crash_soon)
            with pytest.raises(ConnectionClosed, match="left the network"):
                await client.request(StatusRequest())
            with pytest.raises(ConnectionClosed):
                await client.request(StatusRequest())


async def test_handlers_see_who_sent(autojump_clock):
    seen = []

    async def note(peer, message):
        seen.append(peer)
        return StatusReply({})

    network = MemoryNetwork(random.Random(11))
    async with (
        network.open_node(1, note, peers=PEERS) as one,
        network.open_node(2, note, peers=PEERS),
    ):
        one.send_nowait(2, beat(1))
        async with network.connect(2) as client:
            await client.request(StatusRequest())
        await trio.sleep(1)
    assert seen[0] == ConnectionInfo(role=Role.PEER, node_id=1, remote="memory:1")
    assert seen[1].role is Role.CLIENT and seen[1].node_id is None


def trace_of_seed(seed: int) -> list:
    async def main():
        network = MemoryNetwork(random.Random(seed))
        network.set_faults(
            LinkFaults(
                drop_probability=0.1,
                delay_s_min=0.001,
                delay_s_max=0.05,
                duplicate_probability=0.05,
                reorder_probability=0.2,
            )
        )

        async def scenario(nodes, recorders):
            for term in range(300):
                for src in (1, 2, 3):
                    for dst in (1, 2, 3):
                        nodes[src].send_nowait(dst, beat(term))
                await trio.sleep(0.01)
            await trio.sleep(1)

        recorders = await run_cluster(network, scenario)
        return [(node_id, recorder.arrivals) for node_id, recorder in sorted(recorders.items())]

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_seed_replays_the_same_run():
    assert trace_of_seed(12) == trace_of_seed(12)
    assert trace_of_seed(12) != trace_of_seed(13)


@pytest.mark.parametrize(
    "faults",
    [
        {"drop_probability": 1.5},
        {"duplicate_probability": -0.1},
        {"delay_s_min": 0.2, "delay_s_max": 0.1},
        {"delay_s_min": -1.0},
    ],
)
def test_nonsense_faults_are_refused(faults):
    with pytest.raises(ValueError):
        LinkFaults(**faults)
