"""One established connection: a bounded queue of frames out, replies matched to requests by
correlation id, and inbound messages handed to the handler.

Several requests may be in flight each way (pipelining). The reader hands one-way messages
to the handler in order and waits for it, and stops reading while `inflight_max` requests
are being served: a busy handler slows this connection down, it never grows a queue. A
request the handler takes (`take_request`, transport/network.py) holds its slot until it is
answered, without a task of its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from quorumlog.transport.codec import REPLY_TYPES, Frame, encode_frame_parts
from quorumlog.transport.errors import ConnectionClosed, ProtocolError, TransportError
from quorumlog.transport.framing import READ_BYTES_MAX, FrameDecoder
from quorumlog.transport.messages import (
    HANDSHAKE_TYPES,
    ErrorCode,
    ErrorReply,
    Message,
)
from quorumlog.transport.network import ConnectionInfo, Handler, Limits, request_taker

# Frame pieces gathered into one write (the kernel's own limit, IOV_MAX, is 1024), and
# passed to one writev call: each call takes what the socket has room for, and handing it
# hundreds of pieces it will not reach costs more than the call.
WRITE_PARTS_MAX = 512
WRITEV_PARTS_MAX = 16
# Streams without scatter-gather get small pieces joined up to this many bytes.
JOIN_BYTES_MAX = 256 * 1024
# Bytes read without waiting before the reader lets the other tasks run: what one read of
# trio's took at most (the decoder's largest read).
READ_BYTES_UNWAITED_MAX = READ_BYTES_MAX


class _Pending:
    """A request waiting for its reply."""

    __slots__ = ("done", "error", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: Message | None = None
        self.error: ConnectionClosed | None = None


class Connection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        info: ConnectionInfo,
        *,
        decoder: FrameDecoder,
        limits: Limits,
        handler: Handler | None = None,  # None: this side only sends and takes replies
    ) -> None:
        self.info = info
        self._stream = stream
        # A plain socket is read into the decoder's buffer and written with writev; other
        # streams (TLS, test streams, platforms without writev) go through the Stream API.
        socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._socket = socket if hasattr(os, "writev") else None
        self._decoder = decoder
        self._limits = limits
        self._handler = handler
        self._take_request = request_taker(handler)
        # Each item is one frame, as the pieces encode_frame_parts made.
        self._outgoing_send, self._outgoing_receive = trio.open_memory_channel[tuple[bytes, ...]](
            limits.send_queue_max
        )
        self._pending: dict[int, _Pending] = {}
        self._next_correlation_id = 1
        self._request_slots = trio.Semaphore(limits.inflight_max)
        self._serving_slots = trio.Semaphore(limits.inflight_max)
        self._nursery: trio.Nursery | None = None
        self._ended = False
        self._end_reason: TransportError | None = None

    # --- sending ----------------------------------------------------------------------

    def send_nowait(self, message: Message) -> bool:
        """Queue a one-way message; False if the queue is full or the connection is gone."""
        frame = self._encode(0, message)
        if self._ended:
            return False
        try:
            self._outgoing_send.send_nowait(frame)
        except (trio.WouldBlock, trio.BrokenResourceError):
            return False
        return True

    async def send(self, message: Message) -> None:
        """Queue a one-way message, waiting for room in the queue."""
        await self._enqueue(self._encode(0, message))

    async def request(self, message: Message) -> Message:
        """Send a request and wait for its reply; raises ConnectionClosed if the connection ends."""
        slots = self._request_slots
        # Waiting for the reply is this call's checkpoint: a free slot and room in the queue
        # are taken without yielding (two scheduler passes fewer per request).
        try:
            slots.acquire_nowait()
        except trio.WouldBlock:
            await slots.acquire()
        try:
            correlation_id = self._next_correlation_id
            self._next_correlation_id += 1
            frame = self._encode(correlation_id, message)
            pending = _Pending()
            self._pending[correlation_id] = pending
            try:
                if self._ended:
                    raise self._closed_error()
                try:
                    self._outgoing_send.send_nowait(frame)
                except trio.WouldBlock:
                    await self._enqueue(frame)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    raise self._closed_error() from None
                await pending.done.wait()
            finally:
                del self._pending[correlation_id]
        finally:
            slots.release()
        if pending.error is not None:
            raise pending.error
        assert pending.reply is not None
        return pending.reply

    def _encode(self, correlation_id: int, message: Message) -> tuple[bytes, ...]:
        assert type(message) not in HANDSHAKE_TYPES, "handshake messages are the transport's own"
        return encode_frame_parts(correlation_id, message, self._limits.frame_bytes_max)

    async def _enqueue(self, frame: tuple[bytes, ...]) -> None:
        if self._ended:
            raise self._closed_error()
        try:
            await self._outgoing_send.send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise self._closed_error() from None

    def _closed_error(self) -> ConnectionClosed:
        why = "closed by the remote" if self._end_reason is None else str(self._end_reason)
        return ConnectionClosed(f"connection to {self.info.remote} ended: {why}")

    # --- running ------------------------------------------------------------------------

    async def run(self) -> TransportError | None:
        """Carry frames until the connection ends; returns why (None: the remote closed it).

        Pending requests then fail with ConnectionClosed. Only a bug (an exception from the
        handler, a reply that is not a reply type) escapes from here.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._until_ended, self._write_loop)
                nursery.start_soon(self._until_ended, self._read_loop)
        finally:
            self._ended = True
            error = self._closed_error()
            for pending in self._pending.values():
                pending.error = error
                pending.done.set()
            self._outgoing_receive.close()  # wakes senders waiting for room
            # Shielded: a cancellation arriving here must not replace the exception (a
            # handler's bug) that may be on its way out.
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._stream)
        return self._end_reason

    async def _until_ended(self, loop: Callable[[], Awaitable[None]]) -> None:
        reason: TransportError | None = None
        try:
            await loop()
        except TransportError as exc:
            reason = exc
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            reason = ConnectionClosed(str(exc) or type(exc).__name__)
        if not self._ended:
            self._ended = True
            self._end_reason = reason
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()

    async def _write_loop(self) -> None:
        receive = self._outgoing_receive
        while True:
            parts = list(await receive.receive())
            if len(parts) > 1:
                # A large frame (its batches spliced in): let the tasks that are sending run
                # once more before writing, so that what they queue goes out in the same
                # write (measured: 32 KiB frames gain a sixth in MB/s). Small frames go at
                # once: their senders (the node's main loop, a round of replies) queued all
                # they had together, and a pass of the scheduler costs more than a write.
                await trio.lowlevel.checkpoint()
            while len(parts) < WRITE_PARTS_MAX:
                try:
                    parts += receive.receive_nowait()
                except trio.WouldBlock:
                    break
            await self._write(parts)

    async def _write(self, parts: list[bytes]) -> None:
        if self._socket is None:
            # No scatter-gather (TLS, test streams): join small writes, send big pieces whole.
            if sum(map(len, parts)) <= JOIN_BYTES_MAX:
                await self._stream.send_all(b"".join(parts))
            else:
                for part in parts:
                    await self._stream.send_all(part)
            return
        # One writev for many frames and for the pieces of a large one: no copy, and no
        # tiny writes that would each wake the reader for a few bytes. On the socket's own
        # descriptor: a trio socket call that does not block still passes through the
        # scheduler once more after it, a pass for every write; this loop already passes
        # through it when it waits for frames to send.
        views = [memoryview(part) for part in parts if part]
        first = 0
        while first < len(views):
            fd = self._socket.fileno()  # each time: -1 once the socket is closed
            if fd < 0:
                raise trio.ClosedResourceError("the socket was closed")
            try:
                sent = os.writev(fd, views[first : first + WRITEV_PARTS_MAX])
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._socket)
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            while sent:
                if sent >= len(views[first]):
                    sent -= len(views[first])
                    first += 1
                else:
                    views[first] = views[first][sent:]
                    sent = 0

    async def _read_loop(self) -> None:
        decoder = self._decoder
        socket = self._socket
        handler = self._handler
        info = self.info
        unwaited = 0  # bytes read since the reader last passed through the scheduler
        drained = False  # the last read left room: the socket had no more for now
        while True:
            while (frame := decoder.next_frame()) is not None:
                one_way = frame.correlation_id == 0 and type(frame.message) not in HANDSHAKE_TYPES
                if one_way and handler is not None:
                    await handler(info, frame.message)  # Raft's path, without the detour
                else:
                    await self._dispatch(frame)
            if self._ended:  # the writer failed: read no more requests that cannot be answered
                return
            if drained:
                # Straight to waiting: another read now would most likely find nothing, a
                # system call (and an exception) for every message received.
                drained = False
                unwaited = 0
                await trio.lowlevel.wait_readable(socket)
            with decoder.get_buffer() as room:
                if socket is not None:
                    # Straight into the decoder's buffer (one copy fewer per frame), from
                    # the descriptor: a read that finds bytes waiting does not pass through
                    # the scheduler (trio's recv_into would, after every call). One does
                    # after READ_BYTES_UNWAITED_MAX, as often as trio's reads of at most
                    # that much did, so that a peer sending without pause cannot keep the
                    # node's other tasks from running.
                    received = self._read_now(socket, room)
                    drained = 0 <= received < len(room)
                else:
                    data = await self._stream.receive_some(len(room))
                    received = len(data)
                    room[:received] = data
            if received < 0:
                unwaited = 0
                await trio.lowlevel.wait_readable(socket)
                continue
            if not received:
                if decoder.buffered_bytes:
                    raise ConnectionClosed("closed by the remote in the middle of a frame")
                return
            decoder.buffer_updated(received)
            unwaited += received
            if socket is not None and unwaited >= READ_BYTES_UNWAITED_MAX:
                unwaited = 0
                await trio.lowlevel.checkpoint()

    @staticmethod
    def _read_now(socket: trio.socket.SocketType, room: memoryview) -> int:
        """Bytes read into `room` without waiting; -1 if none were there."""
        fd = socket.fileno()  # each time: -1 once the socket is closed, never a reused one
        if fd < 0:
            raise trio.ClosedResourceError("the socket was closed")
        try:
            return os.readv(fd, [room])
        except BlockingIOError:
            return -1
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    async def _dispatch(self, frame: Frame) -> None:
        message = frame.message
        kind = type(message)
        if kind in HANDSHAKE_TYPES:
            raise ProtocolError(f"{kind.__name__} after the handshake")
        if frame.correlation_id != 0 and kind in REPLY_TYPES:
            self._resolve(frame)
            return
        handler = self._handler
        if handler is None:
            raise ProtocolError(f"unexpected {kind.__name__}: this side only takes replies")
        if frame.correlation_id == 0:
            await handler(self.info, message)
            return
        slots = self._serving_slots
        try:
            slots.acquire_nowait()  # the reader passes through the scheduler often enough
        except trio.WouldBlock:
            await slots.acquire()
        take = self._take_request
        if take is not None and take(self.info, message, partial(self._answer, frame)):
            return  # its slot is released by _answer
        assert self._nursery is not None
        self._nursery.start_soon(self._serve, handler, frame)

    def _resolve(self, frame: Frame) -> None:
        pending = self._pending.get(frame.correlation_id)
        if pending is not None:
            pending.reply = frame.message
            pending.done.set()
        elif frame.correlation_id >= self._next_correlation_id:
            raise ProtocolError(f"reply to request {frame.correlation_id}, never sent")
        # else the requester stopped waiting (its deadline passed): a late reply is harmless.

    def _answer(self, frame: Frame, reply: Message) -> None:
        """The reply to a request the handler took (`take_request`): queued without waiting
        when the send queue has room, else by a task that waits for room."""
        if type(reply) not in REPLY_TYPES:
            raise TypeError(f"handler answered a request with {type(reply).__name__}")
        if self._ended:
            self._serving_slots.release()
            return  # the reply goes with the connection
        data = self._reply_frame(frame, reply)
        try:
            self._outgoing_send.send_nowait(data)
        except trio.WouldBlock:
            assert self._nursery is not None
            self._nursery.start_soon(self._send_reply, data)
            return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self._serving_slots.release()

    async def _send_reply(self, data: tuple[bytes, ...]) -> None:
        try:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._outgoing_send.send(data)
        finally:
            self._serving_slots.release()

    def _reply_frame(self, frame: Frame, reply: Message) -> tuple[bytes, ...]:
        try:
            return self._encode(frame.correlation_id, reply)
        except ValueError as exc:
            return self._encode(frame.correlation_id, ErrorReply(ErrorCode.TOO_LARGE, str(exc)))

    async def _serve(self, handler: Handler, frame: Frame) -> None:
        try:
            reply = await handler(self.info, frame.message)
        except BaseException:
            self._serving_slots.release()
            raise
        if reply is None:
            self._serving_slots.release()
        else:
            self._answer(frame, reply)  # releases the slot once the reply is queued
