"""A client's connections to the brokers: one per address, dialled on first use (one dial
at a time per address), run in the client's nursery, forgotten when they end."""

from __future__ import annotations

import ssl

import trio

from quorumlog.client.errors import AuthError, UnreachableError
from quorumlog.transport.connection import Connection
from quorumlog.transport.errors import AuthError as TransportAuthError
from quorumlog.transport.errors import ConnectionClosed, ConnectionRefused
from quorumlog.transport.messages import Message, Role
from quorumlog.transport.network import DEFAULT_LIMITS
from quorumlog.transport.tcp import dial
from quorumlog.transport.tls import CLOSED_HINT


class BrokerConnections:
    def __init__(self, secret: bytes | None, ssl_context: ssl.SSLContext | None) -> None:
        self._secret = secret
        self._ssl_context = ssl_context
        self._connections: dict[str, Connection] = {}
        self._dialing: dict[str, trio.Lock] = {}
        self.nursery: trio.Nursery | None = None  # the client's, set when it is entered

    async def request(self, address: str, message: Message) -> Message:
        """`message` sent to `address` and its reply; ConnectionClosed if the connection
        ended meanwhile, UnreachableError or AuthError if it could not be made."""
        connection = await self._connection(address)
        try:
            return await connection.request(message)
        except ConnectionClosed:
            self._forget(address, connection)
            raise

    async def _connection(self, address: str) -> Connection:
        connection = self._connections.get(address)
        if connection is not None:  # the common case, without a lock's pass of the scheduler
            return connection
        lock = self._dialing.setdefault(address, trio.Lock())
        async with lock:
            connection = self._connections.get(address)
            if connection is None:
                try:
                    connection = await dial(
                        address,
                        role=Role.CLIENT,
                        node_id=None,
                        secret=self._secret,
                        ssl_context=self._ssl_context,
                        limits=DEFAULT_LIMITS,
                    )
                except TransportAuthError as exc:
                    raise AuthError(str(exc)) from None
                except ConnectionClosed as exc:
                    hint = f": {CLOSED_HINT}" if self._ssl_context else ""
                    refused = isinstance(exc, ConnectionRefused)
                    raise UnreachableError(f"{exc}{hint}", refused=refused) from None
                assert self.nursery is not None, "use AsyncClient in `async with`"
                self.nursery.start_soon(self._run, address, connection)
                self._connections[address] = connection
            return connection

    async def _run(self, address: str, connection: Connection) -> None:
        try:
            await connection.run()
        finally:
            self._forget(address, connection)

    def _forget(self, address: str, connection: Connection) -> None:
        if self._connections.get(address) is connection:  # not a newer one dialled since
            del self._connections[address]
