"""The node's one TCP listener: peers and clients on one port, told apart by the handshake.

Each accepted socket gets the TLS layer (if configured), a bounded handshake, then a
Connection running the node's handler. Whatever goes wrong on one connection (garbage,
a wrong secret, silence, a protocol error) closes that connection with a logged reason;
the listener keeps serving everyone else.
"""

from __future__ import annotations

import ssl

import structlog
import trio

from quorumlog.transport.addresses import format_address, is_loopback
from quorumlog.transport.connection import Connection
from quorumlog.transport.errors import AuthError, ProtocolError, TransportError, WrongClusterError
from quorumlog.transport.framing import FrameDecoder
from quorumlog.transport.handshake import listen_handshake, refuse
from quorumlog.transport.identity import ClusterIdentity
from quorumlog.transport.network import Handler, Limits

logger = structlog.get_logger(__name__)


class Listener:
    def __init__(
        self,
        node_id: int,
        handler: Handler,
        *,
        secret: bytes | None,
        ssl_context: ssl.SSLContext | None,
        limits: Limits,
        identity: ClusterIdentity | None = None,
    ) -> None:
        self._node_id = node_id
        self._identity = identity
        self._handler = handler
        self._secret = secret
        self._ssl_context = ssl_context
        self._limits = limits
        self._connections = 0
        # The latest connection each peer dialled in on: the way back to a peer this node
        # has no link to yet (a node that joins learns its peers only from the log).
        self.inbound_peers: dict[int, Connection] = {}
        self._logger = logger.bind(node_id=node_id)

    async def serve(
        self,
        host: str,
        port: int,
        *,
        task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on host:port (0 picks a free port); reports the bound addresses when ready."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        addresses = [format_address(listener.socket.getsockname()) for listener in listeners]
        if self._secret is None and not is_loopback(host):
            self._logger.warning(
                "listening_without_secret",
                addresses=addresses,
                hint="ANYONE WHO CAN REACH THIS PORT CAN JOIN THE CLUSTER AND WRITE TO THE LOG; "
                "set a secret (--secret-file) or listen on 127.0.0.1",
            )
        self._logger.info("listening", addresses=addresses, tls=self._ssl_context is not None)
        task_status.started(addresses)
        await trio.serve_listeners(self._serve_socket, listeners)

    async def _serve_socket(self, socket_stream: trio.SocketStream) -> None:
        try:
            remote = format_address(socket_stream.socket.getpeername())
        except OSError:  # it hung up before we looked
            await trio.aclose_forcefully(socket_stream)
            return
        stream: trio.abc.Stream = socket_stream
        if self._ssl_context is not None:
            stream = trio.SSLStream(socket_stream, self._ssl_context, server_side=True)
        log = self._logger.bind(remote=remote)
        try:
            if self._connections >= self._limits.connections_max:
                log.warning("connection_refused", connections_max=self._limits.connections_max)
                with trio.move_on_after(self._limits.handshake_timeout_s):
                    await refuse(stream, f"connections_max {self._limits.connections_max} reached")
                return
            self._connections += 1
            try:
                await self._serve_connection(stream, remote, log)
            finally:
                self._connections -= 1
        finally:
            with trio.CancelScope(shield=True):  # never hide an exception on its way out
                await trio.aclose_forcefully(stream)

    async def _serve_connection(
        self, stream: trio.abc.Stream, remote: str, log: structlog.typing.FilteringBoundLogger
    ) -> None:
        decoder = FrameDecoder(self._limits.frame_bytes_max)
        try:
            with trio.fail_after(self._limits.handshake_timeout_s):
                info = await listen_handshake(
                    stream,
                    decoder,
                    node_id=self._node_id,
                    secret=self._secret,
                    remote=remote,
                    identity=self._identity,
                )
        except trio.TooSlowError:
            log.warning(
                "handshake_failed",
                reason=f"no handshake within {self._limits.handshake_timeout_s} s",
            )
            return
        except AuthError as exc:
            log.warning("auth_failed", reason=str(exc))
            return
        except WrongClusterError as exc:
            log.warning("foreign_peer_refused", peer=exc.peer_id, reason=str(exc))
            return
        except ProtocolError as exc:
            log.warning("handshake_failed", reason=str(exc))
            return
        except TransportError as exc:
            log.info("handshake_failed", reason=str(exc))
            return
        log = log.bind(role=info.role.name.lower(), peer=info.node_id)
        log.debug("connection_open")
        connection = Connection(
            stream, info, decoder=decoder, limits=self._limits, handler=self._handler
        )
        if info.node_id is not None:
            self.inbound_peers[info.node_id] = connection
        try:
            reason = await connection.run()
        finally:
            if info.node_id is not None and self.inbound_peers.get(info.node_id) is connection:
                del self.inbound_peers[info.node_id]
        match reason:
            case None:
                log.debug("connection_closed", reason="closed by the remote")
            case ProtocolError():
                log.warning("protocol_error", reason=str(reason))
            case _:
                log.info("connection_closed", reason=str(reason))
