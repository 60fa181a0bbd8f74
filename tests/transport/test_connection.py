"""Connection over in-memory streams: pipelining, one-way order, limits, endings."""

import random
import socket

import pytest
import trio
import trio.testing

from quorumlog.raft.messages import AppendEntries, Heartbeat, VoteReply
from quorumlog.transport import connection, framing
from quorumlog.transport.codec import LENGTH_PREFIX, encode_frame
from quorumlog.transport.connection import Connection
from quorumlog.transport.errors import ConnectionClosed, ProtocolError
from quorumlog.transport.framing import FrameDecoder
from quorumlog.transport.messages import (
    ErrorCode,
    ErrorReply,
    ReadReply,
    ReadRequest,
    Role,
    StatusReply,
    StatusRequest,
)
from quorumlog.transport.network import DEFAULT_LIMITS, ConnectionInfo, Limits

CLIENT = ConnectionInfo(role=Role.CLIENT, node_id=None, remote="test:client")
SERVER = ConnectionInfo(role=Role.PEER, node_id=1, remote="test:server")


def pair(handler, *, limits=DEFAULT_LIMITS, lockstep=False):
    make = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
    client_stream, server_stream = make()
    client = Connection(client_stream, SERVER, decoder=FrameDecoder(), limits=limits)
    server = Connection(
        server_stream, CLIENT, decoder=FrameDecoder(), limits=limits, handler=handler
    )
    return client, server


async def test_pipelined_requests_get_their_own_replies(autojump_clock):
    rng = random.Random(7)

    async def handler(peer, message):
        await trio.sleep(rng.random())  # replies come back in a different order
        return ReadReply(b"%d" % message.offset, message.offset, 0)

    client, server = pair(handler)
    answers = {}

    async def ask(offset):
        answers[offset] = await client.request(ReadRequest(offset, 100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        async with trio.open_nursery() as requests:
            for offset in range(20):
                requests.start_soon(ask, offset)
        nursery.cancel_scope.cancel()
    assert answers == {offset: ReadReply(b"%d" % offset, offset, 0) for offset in range(20)}


async def test_one_way_messages_arrive_in_order_and_get_no_reply(autojump_clock):
    received = []

    async def handler(peer, message):
        assert peer == CLIENT
        await trio.sleep(0.01)
        received.append(message.term)
        return VoteReply(
            group=1, node_id=1, term=1, granted=True, pre_vote=False
        )  # discarded: nobody asked

    client, server = pair(handler)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        for term in range(50):
            assert client.send_nowait(Heartbeat(group=1, term=term, leader_id=1, leader_commit=0))
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert received == list(range(50))


async def test_inflight_max_bounds_concurrent_requests(autojump_clock):
    running = 0
    peak = 0

    async def handler(peer, message):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1
        return StatusReply({})

    client, server = pair(handler, limits=Limits(inflight_max=3))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        start = trio.current_time()
        async with trio.open_nursery() as requests:
            for _ in range(9):
                requests.start_soon(client.request, StatusRequest())
        assert trio.current_time() - start == pytest.approx(3, abs=0.1)
        nursery.cancel_scope.cancel()
    assert peak == 3


async def test_full_send_queue_drops_instead_of_blocking(autojump_clock):
    async def handler(peer, message):
        await trio.sleep_forever()  # the server stops reading after the first message

    client, server = pair(handler, limits=Limits(send_queue_max=4), lockstep=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        await trio.sleep(1)
        accepted = [
            client.send_nowait(Heartbeat(group=1, term=n, leader_id=1, leader_commit=0))
            for n in range(20)
        ]
        await trio.sleep(1)
        accepted += [
            client.send_nowait(Heartbeat(group=1, term=n, leader_id=1, leader_commit=0))
            for n in range(20)
        ]
        nursery.cancel_scope.cancel()
    assert accepted.count(True) < 15 and accepted[:4] == [True] * 4 and not accepted[-1]


async def test_ending_fails_pending_requests(autojump_clock):
    async def handler(peer, message):
        await trio.sleep_forever()

    client, server = pair(handler)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        server_scope = trio.CancelScope()

        async def run_server():
            with server_scope:
                await server.run()

        nursery.start_soon(run_server)
        await trio.sleep(0.1)

        async def stop_server_later():
            await trio.sleep(1)
            server_scope.cancel()

        nursery.start_soon(stop_server_later)
        with pytest.raises(ConnectionClosed, match="closed by the remote"):
            await client.request(StatusRequest())
        with pytest.raises(ConnectionClosed):
            await client.request(StatusRequest())
        assert not client.send_nowait(Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
        nursery.cancel_scope.cancel()


async def run_server_against(raw: bytes, handler=None):
    """Run a server connection fed `raw`; returns why it ended."""

    async def echo(peer, message):
        return StatusReply({})

    client_stream, server_stream = trio.testing.memory_stream_pair()
    server = Connection(
        server_stream, CLIENT, decoder=FrameDecoder(), limits=Limits(), handler=handler or echo
    )
    await client_stream.send_all(raw)
    await client_stream.send_eof()
    with trio.fail_after(5):
        return await server.run()


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"\x00\x00\x00\x03abc", ProtocolError),
        (LENGTH_PREFIX.pack(2**31), ProtocolError),
        (
            encode_frame(7, VoteReply(group=1, node_id=1, term=1, granted=True, pre_vote=False)),
            ProtocolError,
        ),  # a reply nobody asked for
        (encode_frame(0, StatusRequest())[:-1] + b"", ConnectionClosed),
        (encode_frame(0, StatusRequest()) + b"\x00\x00", ConnectionClosed),  # cut in a frame
    ],
)
async def test_bad_input_ends_the_connection_with_its_reason(autojump_clock, raw, reason):
    assert isinstance(await run_server_against(raw), reason)


async def test_handshake_messages_after_the_handshake_are_protocol_errors(autojump_clock):
    from quorumlog.transport.messages import Accepted

    reason = await run_server_against(encode_frame(0, Accepted()))
    assert isinstance(reason, ProtocolError)


async def test_clean_close_by_the_remote_has_no_reason(autojump_clock):
    assert await run_server_against(encode_frame(0, StatusRequest())) is None


async def test_reply_too_large_for_a_frame_becomes_an_error_reply(autojump_clock):
    limits = Limits(frame_bytes_max=10_000)

    async def handler(peer, message):
        return ReadReply(b"x" * 20_000, 0, 0)

    client, server = pair(handler, limits=limits)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        reply = await client.request(ReadRequest(0, 1 << 20))
        nursery.cancel_scope.cancel()
    assert isinstance(reply, ErrorReply) and reply.code is ErrorCode.TOO_LARGE


@pytest.mark.parametrize("one_way", [True, False])
async def test_a_raising_handler_is_a_bug_that_stops_the_connection_loudly(autojump_clock, one_way):
    async def broken(peer, received):
        raise RuntimeError("bug in the handler")

    client, server = pair(broken)
    with pytest.raises(ExceptionGroup) as raised:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run)
            nursery.start_soon(server.run)
            if one_way:
                client.send_nowait(Heartbeat(group=1, term=1, leader_id=1, leader_commit=0))
            else:
                nursery.start_soon(client.request, StatusRequest())
            await trio.sleep_forever()
    assert raised.group_contains(RuntimeError, match="bug in the handler", depth=None)


class Taker:
    """A handler that takes ReadRequests (answered later, some at once) and leaves the rest
    to its coroutine, as the node does with client appends."""

    def __init__(self) -> None:
        self.waiting = []  # (request, answer)
        self.served = 0

    async def __call__(self, peer, message):
        self.served += 1
        return StatusReply({"served": True})

    def take_request(self, peer, message, answer):
        if not isinstance(message, ReadRequest):
            return False
        if message.offset % 2:
            answer(ReadReply(b"at once", message.offset, 0))
        else:
            self.waiting.append((message, answer))
        return True


async def test_a_handler_may_take_requests_and_answer_them_later(autojump_clock):
    taker = Taker()
    client, server = pair(taker, limits=Limits(inflight_max=4, send_queue_max=2))
    answers = {}

    async def ask(offset):
        answers[offset] = await client.request(ReadRequest(offset, 100))

    async def answer_later():
        while len(answers) < 12:
            await trio.sleep(0.1)
            for message, answer in taker.waiting:
                answer(ReadReply(b"later", message.offset, 0))
            taker.waiting.clear()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        nursery.start_soon(server.run)
        nursery.start_soon(answer_later)
        async with trio.open_nursery() as requests:
            for offset in range(12):
                requests.start_soon(ask, offset)
            status = await client.request(StatusRequest())
        nursery.cancel_scope.cancel()
    expected = {o: ReadReply(b"at once" if o % 2 else b"later", o, 0) for o in range(12)}
    assert answers == expected
    assert status == StatusReply({"served": True}) and taker.served == 1


async def test_a_peer_sending_without_pause_does_not_keep_other_tasks_from_running(
    monkeypatch,
):
    """Over a real socket, whose reads need not wait while bytes are there: the reader still
    lets the node's other tasks run (heartbeats, timers) between reads."""
    monkeypatch.setattr(connection, "READ_BYTES_UNWAITED_MAX", 1)
    # Reads of 1 KiB: about 90 of them, all there before the first. (With two reads the
    # scheduler's coin, which of the two runnable tasks goes first, decided the test.)
    monkeypatch.setattr(framing, "READ_BYTES_MIN", 1024)
    monkeypatch.setattr(framing, "READ_BYTES_MAX", 1024)
    frames = [
        encode_frame(0, Heartbeat(group=1, term=term, leader_id=1, leader_commit=0))
        for term in range(6000)
    ]
    ours, theirs = socket.socketpair()
    theirs.settimeout(5)  # a socket buffer too small for the flood fails here, not hangs
    with theirs:
        theirs.sendall(b"".join(frames))
    handled = 0
    seen_by_other_task = []

    async def handler(peer, message):
        nonlocal handled
        handled += 1  # without a pause of its own

    async def other_task():
        while True:
            seen_by_other_task.append(handled)
            await trio.sleep(0)

    server = Connection(
        trio.SocketStream(trio.socket.from_stdlib_socket(ours)),
        CLIENT,
        decoder=FrameDecoder(),
        limits=Limits(),
        handler=handler,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        with trio.fail_after(10):
            assert await server.run() is None  # to the end of the flood
        nursery.cancel_scope.cancel()
    assert handled == len(frames)
    assert any(0 < count < handled for count in seen_by_other_task)


async def test_a_frame_larger_than_the_socket_buffers_goes_out_whole():
    """The writer waits for room and goes on where the socket stopped taking bytes."""
    batches = bytes(range(256)) * 8 * 1024  # 2 MiB
    ours, theirs = socket.socketpair()
    for end in (ours, theirs):
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    received = []

    async def handler(peer, message):
        received.append(message)
        await trio.sleep(0.001)  # a slow reader: the sender finds the socket full

    def stream(end):
        return trio.SocketStream(trio.socket.from_stdlib_socket(end))

    sender = Connection(stream(ours), SERVER, decoder=FrameDecoder(), limits=Limits())
    reader = Connection(
        stream(theirs), CLIENT, decoder=FrameDecoder(), limits=Limits(), handler=handler
    )
    message = AppendEntries(
        group=1,
        term=2,
        leader_id=1,
        prev_offset=0,
        prev_term=0,
        leader_commit=0,
        batches=batches,
        flush=True,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.run)
        nursery.start_soon(reader.run)
        for _ in range(3):
            assert sender.send_nowait(message)
        with trio.fail_after(30):
            while len(received) < 3:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert received == [message] * 3
