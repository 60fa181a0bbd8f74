"""A TCP proxy in front of every node, so that the fault harness can cut links (both ways
or one way), slow them and heal them, without root and without touching the nodes.

Each node listens on a private port; the cluster's configuration names the node's *front*
port instead, so every connection to node B, from a peer or a client, comes through B's
front. The first frame a dialler sends is its Hello, which carries a peer's node id, so
the front knows the link (A -> B) a connection serves and applies the rules of that
direction to each frame, both ways. Frames are dropped whole, as a lossy network loses
messages, so the byte stream stays in step; a cut link looks like a black hole (no reset),
as a real partition does. Client connections (no node id) are never cut.

    links = Links(rng)
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_front, links, 2, front_port, node_port)
    links.partition([{1}, {2, 3}]); links.heal()
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import trio

from quorumlog.transport.codec import LENGTH_PREFIX
from quorumlog.transport.errors import ProtocolError
from quorumlog.transport.framing import decode_frame
from quorumlog.transport.messages import Hello

_PREFIX = LENGTH_PREFIX.size
FRAMES_QUEUED_MAX = 256  # per direction of a connection, while a delay holds them


@dataclass
class Links:
    """The rules in force, per direction (src, dst) between node ids."""

    rng: random.Random
    cut: set[tuple[int, int]] = field(default_factory=set)
    delay_s: dict[tuple[int, int], float] = field(default_factory=dict)
    loss: dict[tuple[int, int], float] = field(default_factory=dict)
    dropped: int = 0

    def partition(self, groups: list[set[int]]) -> None:
        """Cut every link between different groups, both ways."""
        for a in groups:
            for b in groups:
                if a is not b:
                    self.cut.update((x, y) for x in a for y in b)

    def cut_one_way(self, src: int, dst: int) -> None:
        self.cut.add((src, dst))

    def slow(self, pairs: list[tuple[int, int]], delay_s: float, loss: float = 0.0) -> None:
        for pair in pairs:
            self.delay_s[pair] = delay_s
            self.loss[pair] = loss

    def heal(self) -> None:
        self.cut.clear()
        self.delay_s.clear()
        self.loss.clear()

    def passes(self, src: int | None, dst: int | None) -> bool:
        if src is None or dst is None:
            return True  # a client
        if (src, dst) in self.cut:
            self.dropped += 1
            return False
        loss = self.loss.get((src, dst), 0.0)
        if loss and self.rng.random() < loss:
            self.dropped += 1
            return False
        return True

    def delay_of(self, src: int | None, dst: int | None) -> float:
        return 0.0 if src is None or dst is None else self.delay_s.get((src, dst), 0.0)


async def serve_front(
    links: Links,
    node_id: int,
    front_port: int,
    node_port: int,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Forward connections to 127.0.0.1:front_port on to node_id at node_port, until
    cancelled."""
    listeners = await trio.open_tcp_listeners(front_port, host="127.0.0.1")
    task_status.started()
    await trio.serve_listeners(
        lambda stream: _forward(links, node_id, node_port, stream), listeners
    )


async def _forward(links: Links, node_id: int, node_port: int, dialler: trio.SocketStream) -> None:
    async with dialler:
        try:
            node = await trio.open_tcp_stream("127.0.0.1", node_port)
        except OSError:
            return  # the node is down: the dialler sees the connection close
        async with node:
            from_dialler = FrameReader(dialler)
            try:
                hello = await from_dialler.next_frame()
                message = decode_frame(hello).message if hello is not None else None
            except (ProtocolError, trio.BrokenResourceError, OSError):
                return
            src = message.node_id if isinstance(message, Hello) else None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, links, src, node_id, from_dialler, node, hello)
                nursery.start_soon(_pump, links, node_id, src, FrameReader(node), dialler, None)


class FrameReader:
    """Whole frames (length prefix included) from a stream, with no copy of what follows."""

    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self._buffer = bytearray()
        self._start = 0

    async def next_frame(self) -> bytes | None:
        """The next frame; None once the stream ends."""
        while True:
            available = len(self._buffer) - self._start
            if available >= _PREFIX:
                (body,) = LENGTH_PREFIX.unpack_from(self._buffer, self._start)
                end = self._start + _PREFIX + body
                if len(self._buffer) >= end:
                    frame = bytes(self._buffer[self._start : end])
                    self._start = end
                    return frame
            if self._start:
                del self._buffer[: self._start]
                self._start = 0
            data = await self.stream.receive_some(256 * 1024)
            if not data:
                return None
            self._buffer += data


async def _pump(
    links: Links,
    src: int | None,
    dst: int | None,
    source: FrameReader,
    sink: trio.SocketStream,
    first: bytes | None,
) -> None:
    """Frames from `source` to `sink`, each passed, dropped or held by the src -> dst rules.
    Either direction ending closes both streams, which ends the other pump too."""
    send, receive = trio.open_memory_channel[tuple[float, bytes]](FRAMES_QUEUED_MAX)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_deliver, receive, sink)
            frame = first if first is not None else await source.next_frame()
            while frame is not None:
                if links.passes(src, dst):
                    await send.send((trio.current_time() + links.delay_of(src, dst), frame))
                frame = await source.next_frame()
            await send.aclose()
    except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    await trio.aclose_forcefully(sink)
    await trio.aclose_forcefully(source.stream)


async def _deliver(receive: trio.MemoryReceiveChannel, sink: trio.SocketStream) -> None:
    async for due, frame in receive:
        await trio.sleep_until(due)
        await sink.send_all(frame)
