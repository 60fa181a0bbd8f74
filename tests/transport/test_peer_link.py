"""PeerLink: redialling with seeded backoff on trio's clock, and peers that never block others."""

import random

import pytest
import trio
import trio.testing

from quorumlog.cli.localcluster import free_ports
from quorumlog.raft.messages import AppendEntries, Heartbeat
from quorumlog.transport.backoff import Backoff
from quorumlog.transport.connection import Connection
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.framing import FrameDecoder
from quorumlog.transport.messages import Role, StatusReply, StatusRequest
from quorumlog.transport.network import ConnectionInfo, Limits
from quorumlog.transport.peer_link import PeerLink
from quorumlog.transport.tcp import open_tcp_transport

BACKOFF = Backoff(initial_s=0.1, max_s=1.0, multiplier=2.0, jitter=0.5)


def test_backoff_grows_jittered_up_to_its_cap():
    rng = random.Random(3)
    delays = [BACKOFF.delay_s(attempt, rng) for attempt in range(10)]
    for attempt, delay in enumerate(delays):
        ceiling = min(1.0, 0.1 * 2**attempt)
        assert ceiling / 2 <= delay <= ceiling
    assert (
        delays == [BACKOFF.delay_s(attempt, random.Random(3)) for attempt in range(1)] + delays[1:]
    )
    assert BACKOFF.delay_s(10_000, rng) <= 1.0  # no overflow however long a peer stays away


async def test_redials_on_the_seeded_schedule(autojump_clock):
    attempts = []
    failures_before_success = 5
    peers = []

    async def dial(address):
        attempts.append(trio.current_time())
        if len(attempts) <= failures_before_success:
            raise ConnectionClosed("refused")
        ours, theirs = trio.testing.memory_stream_pair()
        peers.append(theirs)
        info = ConnectionInfo(role=Role.PEER, node_id=2, remote=address)
        return Connection(ours, info, decoder=FrameDecoder(), limits=Limits())

    link = PeerLink(1, 2, "peer:2", dial=dial, rng=random.Random(42), backoff=BACKOFF)
    assert not link.send_nowait(Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
    with pytest.raises(ConnectionClosed, match="no connection to peer 2"):
        await link.request(StatusRequest())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.run)
        await trio.sleep(10)
        assert link.connected and link.send_nowait(
            Heartbeat(group=1, term=1, leader_id=1, leader_commit=0)
        )
        await peers[0].aclose()  # the peer goes away: the link redials after a short wait
        await trio.sleep(10)
        nursery.cancel_scope.cancel()

    rng = random.Random(42)
    expected = [0.0]
    for failures in range(failures_before_success):
        expected.append(expected[-1] + BACKOFF.delay_s(failures, rng))
    assert attempts[: len(expected)] == pytest.approx(expected)
    reconnect_wait = attempts[len(expected)] - 10.0
    assert BACKOFF.initial_s / 2 <= reconnect_wait <= BACKOFF.initial_s + 1e-9


async def test_link_connects_once_a_late_peer_starts_listening():
    received = trio.Event()

    async def handler(peer, message):
        assert peer.node_id == 1
        received.set()

    async def ignore(peer, message):
        return None

    # Below the ephemeral range: a port from it (what binding port 0 gives) can be the
    # source port of one of the dials, which then connects to itself (TCP self-connect)
    # and finds a "peer" where nobody listens.
    (port,) = free_ports(1)
    fast = Backoff(initial_s=0.02, max_s=0.1)
    with trio.fail_after(10):
        async with open_tcp_transport(
            1,
            "127.0.0.1:0",
            ignore,
            rng=random.Random(1),
            peers={2: f"127.0.0.1:{port}"},
            backoff=fast,
        ) as one:
            await trio.sleep(0.3)  # several failed dials
            assert not one.send_nowait(2, Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
            async with open_tcp_transport(2, f"127.0.0.1:{port}", handler, rng=random.Random(2)):
                while not received.is_set():
                    one.send_nowait(2, Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
                    await trio.sleep(0.01)


async def test_a_stuck_peer_never_holds_back_the_others():
    batches = b"b" * 256 * 1024
    delivered_to_3 = 0

    async def stuck(peer, message):
        await trio.sleep_forever()  # stops reading: TCP buffers fill up behind it

    async def counting(peer, message):
        nonlocal delivered_to_3
        if isinstance(message, StatusRequest):
            return StatusReply({"delivered": delivered_to_3})
        delivered_to_3 += 1
        return None

    limits = Limits(send_queue_max=8)
    with trio.fail_after(20):
        async with (
            open_tcp_transport(2, "127.0.0.1:0", stuck, rng=random.Random(2)) as two,
            open_tcp_transport(3, "127.0.0.1:0", counting, rng=random.Random(3)) as three,
            open_tcp_transport(
                1,
                "127.0.0.1:0",
                stuck,
                rng=random.Random(1),
                limits=limits,
                peers={2: two.listen_addresses[0], 3: three.listen_addresses[0]},
            ) as one,
        ):
            while not (one.connected(2) and one.connected(3)):
                await trio.sleep(0.01)
            sent_to_2 = 0
            for term in range(200):
                message = AppendEntries(
                    group=1,
                    term=term,
                    leader_id=1,
                    prev_offset=0,
                    prev_term=0,
                    leader_commit=0,
                    batches=batches,
                    flush=False,
                )
                sent_to_2 += one.send_nowait(2, message)
                assert one.send_nowait(3, message)
                # A round trip to 3 (served after the frame before it) while 2 is stuck.
                reply = await one.request(3, StatusRequest())
                assert reply == StatusReply({"delivered": term + 1})
            # 2 took a few frames into its socket buffers and queue, then refused at once.
            assert sent_to_2 < 100


async def test_set_peers_opens_and_closes_links():
    async def ignore(peer, message):
        return None

    with trio.fail_after(10):
        async with (
            open_tcp_transport(2, "127.0.0.1:0", ignore, rng=random.Random(2)) as two,
            open_tcp_transport(1, "127.0.0.1:0", ignore, rng=random.Random(1)) as one,
        ):
            assert not one.send_nowait(2, Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
            one.set_peers({1: "ignored:1", 2: two.listen_addresses[0]})
            while not one.connected(2):
                await trio.sleep(0.01)
            assert not one.connected(1)  # never a link to itself
            one.set_peers({})
            assert not one.send_nowait(2, Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
            with pytest.raises(ConnectionClosed, match="no connection to peer"):
                await one.request(2, StatusRequest())
