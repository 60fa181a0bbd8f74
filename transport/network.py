"""The interface between the consensus code and the network; TCP and memory both provide it.

A node's actors see three things, whatever the network underneath:

1. A handler they give when the node's transport opens:

       async def handler(peer: ConnectionInfo, message: Message) -> Message | None

   It receives every message sent to the node, from peers and clients alike; `peer` says
   who sent it. One-way messages (Raft traffic) are handed over in order, one at a time
   per sending connection, and the handler is awaited before the next one is read: a slow
   handler holds back that one sender, nobody else. Its return value is discarded. Requests
   run concurrently (up to `Limits.inflight_max` per connection); the handler's return
   value, which must be a reply type (messages.REPLY_TYPES), is the reply, and None sends
   none (the requester's own deadline then ends its wait). A handler that raises is a bug:
   the exception ends the node's transport (fail-stop) rather than being logged away.
   Batches arrive as the bytes that were sent and are not checked here: the receiver checks
   them (log/batch.py) before it trusts them.

   A handler may also have a method `take_request(peer, message, answer) -> bool`: a
   request it can start without waiting (a client append put in the node's mailbox). True
   means it took the request and calls `answer(reply)` exactly once, from the trio thread,
   at once or later; False sends the request to the handler as above. It spares a task and
   two task switches per request, which single-record appends feel.

   And a method `peer_connected(peer_id)`, called (from the trio thread) when this node's
   link to a peer connects: whatever was sent to that peer while there was none was
   dropped, and can go again now instead of after a retransmit timeout.

2. A `NodeTransport` to reach the other nodes by id:
   - `send_nowait(peer_id, message) -> bool` one-way, never blocks. It goes over this
     node's link to that peer or, while there is none or it is down, back over the
     connection the peer dialled in on: a joining node, which learns its peers only from
     the log, can answer the leader. False means it was dropped here (no connection to that
     peer, or its bounded send queue is full); True means it left, which on any real
     network still does not mean it arrived. Raft resends what matters, so callers just
     carry on.
   - `await request(peer_id, message) -> reply` pipelined the same way; raises
     ConnectionClosed if there is no connection or it breaks before the reply. It has no
     timeout of its own: wrap it in `trio.move_on_after` / `fail_after`.
   - `set_peers({peer_id: "host:port"})` the peers to keep links to; links to others close.
   - `connected(peer_id) -> bool` whether this node's link to that peer is up now (a
     crashed peer's closes at once; a cut network may leave it up for a while).

3. For clients, a `ClientConnection` to one node: `await request(message) -> reply` and
   `send_nowait(message) -> bool`, with the same meaning as above.

Open them with, for TCP (transport/tcp.py):

    async with open_tcp_transport(node_id, "127.0.0.1:7001", handler, peers=..., rng=rng,
                                  secret=secret) as transport: ...
    async with open_connection("127.0.0.1:7001", secret=secret) as connection: ...

and in a simulation (transport/memory.py), where addresses are ignored:

    network = MemoryNetwork(random.Random(seed))
    async with network.open_node(node_id, handler, peers=...) as transport: ...
    async with network.connect(node_id) as connection: ...

Both kinds carry every message through the real codec. What differs is only what a real
network adds: TCP authenticates and reconnects; the memory network drops, delays,
duplicates, reorders and partitions on command, from its seeded generator and trio's clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from quorumlog.transport.codec import FRAME_BYTES_MAX
from quorumlog.transport.messages import Message, Role


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """Who is at the other end of a connection, as its handshake established."""

    role: Role
    node_id: int | None  # the remote node's id; None for a client
    remote: str  # "host:port", or "memory:<id>" in simulation


Handler = Callable[[ConnectionInfo, Message], Awaitable[Message | None]]
Answer = Callable[[Message], None]


def request_taker(
    handler: Handler | None,
) -> Callable[[ConnectionInfo, Message, Answer], bool] | None:
    """The handler's `take_request` method, if it has one (see above)."""
    return getattr(handler, "take_request", None)


def connection_listener(handler: Handler | None) -> Callable[[int], None] | None:
    """The handler's `peer_connected` method, if it has one (see above)."""
    return getattr(handler, "peer_connected", None)


@dataclass(frozen=True, slots=True)
class Limits:
    """Named maxima of the transport; the defaults suit a node."""

    frame_bytes_max: int = FRAME_BYTES_MAX
    inflight_max: int = 64  # requests in flight per connection, each way
    send_queue_max: int = 128  # frames waiting to be written, per connection (or link)
    connections_max: int = 1024  # open connections per listener
    handshake_timeout_s: float = 5.0  # connect + TLS + handshake, so silence cannot hold a slot


DEFAULT_LIMITS = Limits()


class NodeTransport(Protocol):
    node_id: int

    def send_nowait(self, peer_id: int, message: Message) -> bool: ...

    async def request(self, peer_id: int, message: Message) -> Message: ...

    def set_peers(self, peers: Mapping[int, str]) -> None: ...

    def connected(self, peer_id: int) -> bool: ...


class ClientConnection(Protocol):
    def send_nowait(self, message: Message) -> bool: ...

    async def request(self, message: Message) -> Message: ...
