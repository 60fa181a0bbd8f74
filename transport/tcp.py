"""The TCP network: a node's transport (listener + peer links) and client connections."""

from __future__ import annotations

import os
import random
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial

import trio

from quorumlog.transport.addresses import parse_address
from quorumlog.transport.backoff import DEFAULT_BACKOFF, Backoff
from quorumlog.transport.connection import Connection
from quorumlog.transport.errors import ConnectionClosed, ConnectionRefused, ProtocolError
from quorumlog.transport.framing import FrameDecoder
from quorumlog.transport.handshake import dial_handshake
from quorumlog.transport.identity import ClusterIdentity
from quorumlog.transport.listener import Listener
from quorumlog.transport.messages import Message, Role
from quorumlog.transport.network import DEFAULT_LIMITS, Handler, Limits, connection_listener
from quorumlog.transport.peer_link import PeerLink


async def dial(
    address: str,
    *,
    role: Role,
    node_id: int | None,
    secret: bytes | None,
    ssl_context: ssl.SSLContext | None,
    limits: Limits,
    handler: Handler | None = None,
    identity: ClusterIdentity | None = None,
) -> Connection:
    """Connect and handshake; the Connection is returned before it runs (call its run()).

    A node dials its peers with its handler: a peer with no link of its own to this node
    answers over this connection (see TcpTransport.send_nowait).

    Raises AuthError on an authentication fault, ConnectionClosed if the node cannot be
    reached, refuses, or does not finish the handshake within `handshake_timeout_s`.
    """
    host, port = parse_address(address)
    try:
        with trio.fail_after(limits.handshake_timeout_s):
            stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
            try:
                if ssl_context is not None:
                    stream = trio.SSLStream(stream, ssl_context, server_hostname=host)
                decoder = FrameDecoder(limits.frame_bytes_max)
                info = await dial_handshake(
                    stream,
                    decoder,
                    role=role,
                    node_id=node_id,
                    secret=secret,
                    remote=address,
                    identity=identity,
                )
            except BaseException:
                with trio.CancelScope(shield=True):  # never hide the exception on its way out
                    await trio.aclose_forcefully(stream)
                raise
    except trio.TooSlowError:
        raise ConnectionClosed(
            f"{address}: no handshake within {limits.handshake_timeout_s} s"
        ) from None
    except OSError as exc:
        error = ConnectionRefused if _refused(exc) else ConnectionClosed
        raise error(f"cannot connect to {address}: {_reason(exc)}") from None
    except ProtocolError as exc:  # something else listens there: an HTTP server, say
        raise ConnectionRefused(f"{address} is not a quorumlog node ({exc})") from None
    return Connection(stream, info, decoder=decoder, limits=limits, handler=handler)


def _refused(exc: OSError) -> bool:
    """Whether every attempt of the dial was refused (trio's error has them as its cause)."""
    cause = exc.__cause__
    attempts = cause.exceptions if isinstance(cause, BaseExceptionGroup) else [exc]
    return all(isinstance(a, ConnectionRefusedError) for a in attempts)


def _reason(exc: OSError) -> str:
    """ "Connection refused" rather than trio's "all attempts to connect to ... failed"
    (the attempts' own errors are its cause)."""
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup) and isinstance(cause.exceptions[0], OSError):
        first = cause.exceptions[0]
        return os.strerror(first.errno) if first.errno and first.errno > 0 else str(first)
    return exc.strerror or str(exc)


@asynccontextmanager
async def open_connection(
    address: str,
    *,
    secret: bytes | None = None,
    ssl_context: ssl.SSLContext | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> AsyncIterator[Connection]:
    """A client's connection to one node, closed when the block ends."""
    connection = await dial(
        address,
        role=Role.CLIENT,
        node_id=None,
        secret=secret,
        ssl_context=ssl_context,
        limits=limits,
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        try:
            yield connection
        finally:
            nursery.cancel_scope.cancel()


class TcpTransport:
    """A node's TCP transport (the NodeTransport of network.py): one PeerLink per peer."""

    def __init__(
        self,
        node_id: int,
        nursery: trio.Nursery,
        *,
        listen_addresses: list[str],
        dial_peer: partial[Connection],
        rng: random.Random,
        backoff: Backoff,
        listener: Listener,
        on_peer_connected: Callable[[int], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self._listener = listener
        self.listen_addresses = listen_addresses
        self._nursery = nursery
        self._dial_peer = dial_peer
        self._rng = rng
        self._backoff = backoff
        self._links: dict[int, tuple[PeerLink, trio.CancelScope]] = {}
        self._on_peer_connected = on_peer_connected

    def send_nowait(self, peer_id: int, message: Message) -> bool:
        route = self._route(peer_id)
        return route is not None and route.send_nowait(message)

    async def request(self, peer_id: int, message: Message) -> Message:
        route = self._route(peer_id)
        if route is None:
            raise ConnectionClosed(f"no connection to peer {peer_id}")
        return await route.request(message)

    def _route(self, peer_id: int) -> PeerLink | Connection | None:
        """Our link to the peer while it is up, else the connection the peer dialled in on.

        The second way lets a node answer a peer it has no link to yet (a node that joins
        learns its peers only from the log) or whose link is down.
        """
        entry = self._links.get(peer_id)
        if entry is not None and entry[0].connected:
            return entry[0]
        return self._listener.inbound_peers.get(peer_id)

    def set_peers(self, peers: Mapping[int, str]) -> None:
        for address in peers.values():
            parse_address(address)  # a bad address is the caller's error, raised here
        for peer_id, (link, scope) in list(self._links.items()):
            if peers.get(peer_id) != link.address:
                del self._links[peer_id]
                scope.cancel()
        for peer_id, address in peers.items():
            if peer_id == self.node_id or peer_id in self._links:
                continue
            link = PeerLink(
                self.node_id,
                peer_id,
                address,
                dial=self._dial_peer,
                rng=self._rng,
                backoff=self._backoff,
                on_connected=self._on_peer_connected,
            )
            scope = trio.CancelScope()
            self._links[peer_id] = (link, scope)
            self._nursery.start_soon(self._run_link, link, scope)

    def connected(self, peer_id: int) -> bool:
        entry = self._links.get(peer_id)
        return entry is not None and entry[0].connected

    @staticmethod
    async def _run_link(link: PeerLink, scope: trio.CancelScope) -> None:
        with scope:
            await link.run()


@asynccontextmanager
async def open_tcp_transport(
    node_id: int,
    listen: str,
    handler: Handler,
    *,
    rng: random.Random,
    peers: Mapping[int, str] | None = None,
    secret: bytes | None = None,
    ssl_context: ssl.SSLContext | None = None,
    peer_ssl_context: ssl.SSLContext | None = None,
    limits: Limits = DEFAULT_LIMITS,
    backoff: Backoff = DEFAULT_BACKOFF,
    identity: ClusterIdentity | None = None,
) -> AsyncIterator[TcpTransport]:
    """Listen on `listen` ("host:port", port 0 for any) and keep links to `peers`.

    `ssl_context` serves TLS on the listener, `peer_ssl_context` dials peers with TLS;
    `identity` is the node's cluster, stated and checked in every handshake.
    """
    host, port = parse_address(listen)
    listener = Listener(
        node_id, handler, secret=secret, ssl_context=ssl_context, limits=limits, identity=identity
    )
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(listener.serve, host, port)
        dial_peer = partial(
            dial,
            role=Role.PEER,
            node_id=node_id,
            secret=secret,
            ssl_context=peer_ssl_context,
            limits=limits,
            handler=handler,
            identity=identity,
        )
        transport = TcpTransport(
            node_id,
            nursery,
            listen_addresses=addresses,
            dial_peer=dial_peer,
            rng=rng,
            backoff=backoff,
            listener=listener,
            on_peer_connected=connection_listener(handler),
        )
        transport.set_peers(peers or {})
        try:
            yield transport
        finally:
            nursery.cancel_scope.cancel()
