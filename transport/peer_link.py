"""The outbound connection actor for one peer.

It owns the connection to that peer: dials, and when the connection fails, redials with
jittered exponential backoff from the node's seeded generator and trio's clock. Senders
never wait on it: with no connection or a full send queue, `send_nowait` drops and says so.
Each peer has its own link and queue, so a slow or dead peer never holds back the others.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import NoReturn

import structlog
import trio

from quorumlog.transport.backoff import Backoff
from quorumlog.transport.connection import Connection
from quorumlog.transport.errors import AuthError, ConnectionClosed, ProtocolError, WrongClusterError
from quorumlog.transport.messages import Message

logger = structlog.get_logger(__name__)


class PeerLink:
    def __init__(
        self,
        node_id: int,
        peer_id: int,
        address: str,
        *,
        dial: Callable[[str], Awaitable[Connection]],
        rng: random.Random,
        backoff: Backoff,
        on_connected: Callable[[int], None] | None = None,
    ) -> None:
        self.peer_id = peer_id
        self.address = address
        self._dial = dial
        self._on_connected = on_connected
        self._rng = rng
        self._backoff = backoff
        self._connection: Connection | None = None
        self._logger = logger.bind(node_id=node_id, peer=peer_id, address=address)

    @property
    def connected(self) -> bool:
        return self._connection is not None

    def send_nowait(self, message: Message) -> bool:
        connection = self._connection
        return connection is not None and connection.send_nowait(message)

    async def request(self, message: Message) -> Message:
        connection = self._connection
        if connection is None:
            raise ConnectionClosed(f"no connection to peer {self.peer_id} at {self.address}")
        return await connection.request(message)

    async def run(self) -> NoReturn:
        failures = 0
        while True:
            try:
                connection = await self._dial(self.address)
            except AuthError as exc:
                # Loud, but keep trying: the operator may be fixing the secret right now.
                self._logger.error("peer_auth_failed", reason=str(exc))
            except WrongClusterError as exc:
                self._logger.warning("foreign_peer_refused", reason=str(exc))
            except (ConnectionClosed, ProtocolError) as exc:
                log = self._logger.info if failures == 0 else self._logger.debug
                log("peer_unreachable", reason=str(exc), failures=failures)
            else:
                failures = 0
                self._connection = connection
                self._logger.info("peer_connected")
                if self._on_connected is not None:
                    self._on_connected(self.peer_id)
                try:
                    reason = await connection.run()
                finally:
                    self._connection = None
                self._logger.info(
                    "peer_disconnected",
                    reason="closed by the peer" if reason is None else str(reason),
                )
            # Also after a connection that worked: a peer that accepts and drops at once
            # must not be redialled in a tight loop.
            await trio.sleep(self._backoff.delay_s(failures, self._rng))
            failures += 1
