"""The in-memory network: network.py's interface without sockets, for deterministic simulation.

Every message is encoded to a frame and decoded again by the real codec. Each directed link
(src -> dst) misbehaves as its LinkFaults say, every draw coming from the one seeded
`random.Random` the network is given, every wait from trio's clock: under
`trio.testing.MockClock(autojump_threshold=0)` a seed replays the same run, and hours of
network time pass in moments.

- A link delivers in send order, as a TCP connection would, except messages picked for
  reordering, which keep their own random delay and so may overtake or be overtaken.
- A partition cuts directed links; a message that reaches a cut link, when sent or when
  it would arrive, is lost. `heal` restores every link.
- When an endpoint leaves (its `open_node` or `connect` block ends: a crash), messages in
  flight to or from it are lost and requests waiting on it fail with ConnectionClosed, as a
  reset TCP connection would make them.

What TCP adds and this leaves out: handshakes, TLS and redialling. A link is up whenever
both of its ends are attached, and requests are not limited by `inflight_max`.

Simulated time costs nothing, so a node would handle any load at once. `set_cpu` gives a
node a price per message received: its messages are handled one at a time, each taking
that long, as on a node whose one core is busy (the election storms of many groups need
it to show).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

import trio

from quorumlog.transport.codec import REPLY_TYPES, Frame, encode_frame
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.framing import decode_frame
from quorumlog.transport.messages import (
    HANDSHAKE_TYPES,
    ErrorCode,
    ErrorReply,
    Message,
    Role,
)
from quorumlog.transport.network import (
    DEFAULT_LIMITS,
    ConnectionInfo,
    Handler,
    Limits,
    request_taker,
)

EndpointId = int | str  # node ids are ints; clients are "client-<n>"


@dataclass(frozen=True, slots=True)
class LinkFaults:
    """How one direction of a link misbehaves; the defaults are a perfect link."""

    drop_probability: float = 0.0
    delay_s_min: float = 0.0
    delay_s_max: float = 0.0
    duplicate_probability: float = 0.0
    # Picked messages skip the in-order rule; it takes a delay range to show.
    reorder_probability: float = 0.0

    def __post_init__(self) -> None:
        for name in ("drop_probability", "duplicate_probability", "reorder_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        if not 0.0 <= self.delay_s_min <= self.delay_s_max:
            raise ValueError("delays must satisfy 0 <= delay_s_min <= delay_s_max")


PERFECT_LINK = LinkFaults()


class _Link:
    """Frames in flight from src to dst, delivered by a task in dst's nursery."""

    __slots__ = ("dst", "in_order_at", "next_seq", "queue", "scope", "src", "wakeup")

    def __init__(self, src: EndpointId, dst: EndpointId) -> None:
        self.src = src
        self.dst = dst
        self.queue: list[tuple[float, int, bytes]] = []  # heap of (deliver_at, seq, frame)
        self.next_seq = 0
        self.in_order_at = -math.inf  # in-order frames are never delivered before this
        self.wakeup = trio.lowlevel.ParkingLot()
        self.scope = trio.CancelScope()


class _Pending:
    __slots__ = ("done", "error", "reply", "target")

    def __init__(self, target: EndpointId) -> None:
        self.target = target
        self.done = trio.Event()
        self.reply: Message | None = None
        self.error: ConnectionClosed | None = None


class MemoryNetwork:
    def __init__(self, rng: random.Random, *, limits: Limits = DEFAULT_LIMITS) -> None:
        self._rng = rng
        self._limits = limits
        self._faults: dict[tuple[EndpointId | None, EndpointId | None], LinkFaults] = {}
        self._cut: set[tuple[EndpointId | None, EndpointId | None]] = set()
        self._endpoints: dict[EndpointId, _Endpoint] = {}
        self._links: dict[tuple[EndpointId, EndpointId], _Link] = {}
        self._client_numbers = itertools.count(1)
        self._cpu_s: dict[EndpointId, float] = {}
        self._cpus: dict[EndpointId, trio.Lock] = {}  # held while a message is handled
        # Messages of these types are lost on every link (one kind of traffic lost alone).
        self.dropped_types: frozenset[type] = frozenset()

    # --- faults ------------------------------------------------------------------------

    def set_faults(
        self, faults: LinkFaults, *, src: EndpointId | None = None, dst: EndpointId | None = None
    ) -> None:
        """Faults of the links from src to dst, None matching any endpoint.

        The most specific setting wins: (src, dst), then (src, any), (any, dst), (any, any).
        """
        self._faults[(src, dst)] = faults

    def partition(
        self, side_a: Iterable[EndpointId], side_b: Iterable[EndpointId], *, one_way: bool = False
    ) -> None:
        """Cut every link from side_a to side_b, and back unless `one_way`."""
        side_b = list(side_b)
        for a in side_a:
            for b in side_b:
                self._cut.add((a, b))
                if not one_way:
                    self._cut.add((b, a))

    def isolate(self, endpoint_id: EndpointId) -> None:
        """Cut every link to and from one endpoint, including endpoints that attach later."""
        self._cut.update({(endpoint_id, None), (None, endpoint_id)})

    def heal(self) -> None:
        self._cut.clear()

    def set_cpu(self, endpoint_id: EndpointId, per_message_s: float) -> None:
        """Each message `endpoint_id` receives from now on takes it this long, one at a
        time (0: free)."""
        self._cpu_s[endpoint_id] = per_message_s

    # --- attaching ---------------------------------------------------------------------

    @asynccontextmanager
    async def open_node(
        self, node_id: int, handler: Handler, *, peers: Mapping[int, str] | None = None
    ) -> AsyncIterator[MemoryTransport]:
        """Attach a node; leaving the block is its crash or stop."""
        info = ConnectionInfo(role=Role.PEER, node_id=node_id, remote=f"memory:{node_id}")
        async with self._attach(node_id, info, handler) as endpoint:
            transport = MemoryTransport(endpoint)
            transport.set_peers(peers or {})
            yield transport

    @asynccontextmanager
    async def connect(self, node_id: int) -> AsyncIterator[MemoryConnection]:
        """A client's connection to one node; ConnectionClosed if that node is not attached."""
        if node_id not in self._endpoints:
            raise ConnectionClosed(f"node {node_id} is not on the network")
        client_id = f"client-{next(self._client_numbers)}"
        info = ConnectionInfo(role=Role.CLIENT, node_id=None, remote=f"memory:{client_id}")
        async with self._attach(client_id, info, None) as endpoint:
            yield MemoryConnection(endpoint, node_id)

    @asynccontextmanager
    async def _attach(
        self, endpoint_id: EndpointId, info: ConnectionInfo, handler: Handler | None
    ) -> AsyncIterator[_Endpoint]:
        if endpoint_id in self._endpoints:
            raise ValueError(f"{endpoint_id!r} is already on the network")
        async with trio.open_nursery() as nursery:
            endpoint = _Endpoint(self, endpoint_id, info, handler, nursery)
            self._endpoints[endpoint_id] = endpoint
            try:
                yield endpoint
            finally:
                self._detach(endpoint_id)
                nursery.cancel_scope.cancel()

    def _detach(self, endpoint_id: EndpointId) -> None:
        del self._endpoints[endpoint_id]
        for key in [key for key in self._links if endpoint_id in key]:
            self._links.pop(key).scope.cancel()
        for endpoint in self._endpoints.values():
            endpoint.fail_requests_to(endpoint_id)

    # --- carrying ----------------------------------------------------------------------

    def _post(
        self, src: EndpointId, dst: EndpointId, correlation_id: int, message: Message
    ) -> bool:
        """Put one frame on the link; False if an end is not attached or the link is full."""
        assert type(message) not in HANDSHAKE_TYPES, "handshake messages are the transport's own"
        frame = encode_frame(correlation_id, message, self._limits.frame_bytes_max)
        if src not in self._endpoints or dst not in self._endpoints:
            return False
        if self._is_cut(src, dst) or type(message) in self.dropped_types:
            return True  # lost on the wire: the sender cannot tell
        faults = self._faults_for(src, dst)
        rng = self._rng
        if faults.drop_probability and rng.random() < faults.drop_probability:
            return True
        link = self._link(src, dst)
        if len(link.queue) >= self._limits.send_queue_max:
            return False
        copies = 1
        if faults.duplicate_probability and rng.random() < faults.duplicate_probability:
            copies = 2
        for _ in range(copies):
            self._schedule(link, frame, faults)
        link.wakeup.unpark_all()
        return True

    def _is_cut(self, src: EndpointId, dst: EndpointId) -> bool:
        cut = self._cut
        return bool(cut) and ((src, dst) in cut or (src, None) in cut or (None, dst) in cut)

    def _faults_for(self, src: EndpointId, dst: EndpointId) -> LinkFaults:
        for key in ((src, dst), (src, None), (None, dst), (None, None)):
            faults = self._faults.get(key)
            if faults is not None:
                return faults
        return PERFECT_LINK

    def _link(self, src: EndpointId, dst: EndpointId) -> _Link:
        link = self._links.get((src, dst))
        if link is None:
            link = self._links[(src, dst)] = _Link(src, dst)
            receiver = self._endpoints[dst]
            receiver.nursery.start_soon(self._deliver, link, receiver)
        return link

    def _schedule(self, link: _Link, frame: bytes, faults: LinkFaults) -> None:
        delay_s = faults.delay_s_min
        if faults.delay_s_max > faults.delay_s_min:
            delay_s = self._rng.uniform(faults.delay_s_min, faults.delay_s_max)
        deliver_at = trio.current_time() + delay_s
        if not (faults.reorder_probability and self._rng.random() < faults.reorder_probability):
            deliver_at = max(deliver_at, link.in_order_at)
            link.in_order_at = deliver_at
        heapq.heappush(link.queue, (deliver_at, link.next_seq, frame))
        link.next_seq += 1

    async def _deliver(self, link: _Link, receiver: _Endpoint) -> None:
        with link.scope:
            while True:
                if not link.queue:
                    await link.wakeup.park()
                    continue
                deliver_at, _, frame = link.queue[0]
                if trio.current_time() < deliver_at:
                    with trio.move_on_at(deliver_at):
                        await link.wakeup.park()
                    continue
                heapq.heappop(link.queue)
                if self._is_cut(link.src, link.dst):
                    continue  # the link was cut while the frame was in flight
                if cost_s := self._cpu_s.get(link.dst):
                    async with self._cpus.setdefault(link.dst, trio.Lock()):
                        await trio.sleep(cost_s)
                    if link.dst not in self._endpoints or link.src not in self._endpoints:
                        continue  # an end left meanwhile
                sender = self._endpoints[link.src]
                await receiver.receive(
                    sender.id, sender.info, decode_frame(frame, self._limits.frame_bytes_max)
                )


class _Endpoint:
    """One attached node or client: its handler, its nursery, its requests in flight."""

    def __init__(
        self,
        network: MemoryNetwork,
        endpoint_id: EndpointId,
        info: ConnectionInfo,
        handler: Handler | None,
        nursery: trio.Nursery,
    ) -> None:
        self.id = endpoint_id
        self.info = info  # how this endpoint looks to the handlers of others
        self.nursery = nursery
        self._network = network
        self._handler = handler
        self._take_request = request_taker(handler)
        self._pending: dict[int, _Pending] = {}
        self._next_correlation_id = 1
        self.heard_from: set[EndpointId] = set()  # who reached this endpoint (its way back)

    def post(self, dst: EndpointId, message: Message) -> bool:
        return self._network._post(self.id, dst, 0, message)

    def attached(self, other: EndpointId) -> bool:
        """Whether `other` is on the network now (a link to it is up)."""
        return other in self._network._endpoints

    async def request(self, dst: EndpointId, message: Message) -> Message:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        pending = _Pending(dst)
        self._pending[correlation_id] = pending
        try:
            if not self._network._post(self.id, dst, correlation_id, message):
                raise ConnectionClosed(f"no link from {self.id} to {dst}, or it is full")
            await pending.done.wait()
        finally:
            del self._pending[correlation_id]
        if pending.error is not None:
            raise pending.error
        assert pending.reply is not None
        return pending.reply

    def fail_requests_to(self, target: EndpointId) -> None:
        for pending in self._pending.values():
            if pending.target == target:
                pending.error = ConnectionClosed(f"{target} left the network")
                pending.done.set()

    async def receive(self, src: EndpointId, sender: ConnectionInfo, frame: Frame) -> None:
        self.heard_from.add(src)
        message = frame.message
        if frame.correlation_id != 0 and type(message) in REPLY_TYPES:
            pending = self._pending.get(frame.correlation_id)
            if pending is not None and not pending.done.is_set():
                pending.reply = message
                pending.done.set()
            return  # else a late or duplicated reply: harmless
        assert self._handler is not None, "only nodes are sent requests and one-way messages"
        if frame.correlation_id == 0:
            await self._handler(sender, message)
            return
        take = self._take_request
        if take is None or not take(sender, message, partial(self._answer, src, frame)):
            self.nursery.start_soon(self._serve, src, sender, frame)

    async def _serve(self, src: EndpointId, sender: ConnectionInfo, frame: Frame) -> None:
        assert self._handler is not None
        reply = await self._handler(sender, frame.message)
        if reply is not None:
            self._answer(src, frame, reply)

    def _answer(self, src: EndpointId, frame: Frame, reply: Message) -> None:
        if type(reply) not in REPLY_TYPES:
            raise TypeError(f"handler answered a request with {type(reply).__name__}")
        try:
            self._network._post(self.id, src, frame.correlation_id, reply)
        except ValueError as exc:
            error = ErrorReply(ErrorCode.TOO_LARGE, str(exc))
            self._network._post(self.id, src, frame.correlation_id, error)


class MemoryTransport:
    """A node's NodeTransport on the memory network."""

    def __init__(self, endpoint: _Endpoint) -> None:
        assert isinstance(endpoint.id, int)
        self.node_id: int = endpoint.id
        self._endpoint = endpoint
        self._peers: frozenset[int] = frozenset()

    def send_nowait(self, peer_id: int, message: Message) -> bool:
        return self._reachable(peer_id) and self._endpoint.post(peer_id, message)

    async def request(self, peer_id: int, message: Message) -> Message:
        if not self._reachable(peer_id):
            raise ConnectionClosed(f"no connection to peer {peer_id}")
        return await self._endpoint.request(peer_id, message)

    def connected(self, peer_id: int) -> bool:
        return peer_id in self._peers and self._endpoint.attached(peer_id)

    def _reachable(self, peer_id: int) -> bool:
        # As over TCP: a peer, or a node that reached this one (over TCP it dialled in), even
        # if this node knows no link to it yet (a joining node learns its peers from the log).
        known = peer_id in self._peers or peer_id in self._endpoint.heard_from
        return known and peer_id != self.node_id

    def set_peers(self, peers: Mapping[int, str]) -> None:
        self._peers = frozenset(peers) - {self.node_id}


class MemoryConnection:
    """A client's ClientConnection to one node on the memory network."""

    def __init__(self, endpoint: _Endpoint, node_id: int) -> None:
        self._endpoint = endpoint
        self._node_id = node_id

    def send_nowait(self, message: Message) -> bool:
        return self._endpoint.post(self._node_id, message)

    async def request(self, message: Message) -> Message:
        return await self._endpoint.request(self._node_id, message)
