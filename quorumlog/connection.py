"""A blocking connection to one node over a plain socket, for the sync `Client`.

It runs the dialler's rules of the handshake (transport/handshake.py's DiallerHandshake)
and the same frames (transport/codec.py, framing.py), one request at a time.
Every call takes an absolute deadline (time.monotonic()); the socket's timeout is what is
left of it, so no call outlives its deadline.
"""

from __future__ import annotations

import itertools
import math
import socket
import ssl
import time
from collections.abc import Callable

from quorumlog.errors import AuthError, CallTimeoutError, UnreachableError
from quorumlog.leader_watch import WATCH_AFTER_S, WATCH_EVERY_S
from quorumlog.transport.addresses import parse_address
from quorumlog.transport.codec import encode_frame
from quorumlog.transport.errors import AuthError as TransportAuthError
from quorumlog.transport.errors import ConnectionClosed, ProtocolError
from quorumlog.transport.framing import FrameDecoder
from quorumlog.transport.handshake import DiallerHandshake
from quorumlog.transport.messages import Message, Role
from quorumlog.transport.tls import tls_reason

RECEIVE_BYTES = 256 * 1024


class ConnectionLost(Exception):
    """The connection broke; whether the last request arrived is unknown."""


# A node that refuses a client's certificate closes the connection once TLS is up, often
# before its alert saying why reaches the client.
TLS_HINT = " during the handshake: does the node accept this client's certificate (--tls-cert)?"


class SyncConnection:
    def __init__(
        self,
        address: str,
        secret: bytes | None,
        deadline: float,
        ssl_context: ssl.SSLContext | None = None,
    ):
        self.address = address
        host, port = parse_address(address)
        try:
            self._sock = socket.create_connection((host, port), timeout=_left(deadline))
        except TimeoutError:
            raise CallTimeoutError(f"{address}: no connection before the deadline") from None
        except OSError as exc:
            raise UnreachableError(f"cannot connect to {address}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._tls = ssl_context is not None
        if ssl_context is not None:
            try:
                self._sock = ssl_context.wrap_socket(self._sock, server_hostname=host)
            except ssl.SSLError as exc:
                self._sock.close()
                raise AuthError(f"{address}: TLS refused: {tls_reason(exc)}") from None
            except OSError as exc:
                self._sock.close()
                raise UnreachableError(f"{address}: TLS handshake failed: {exc}") from None
        self._decoder = FrameDecoder()
        self._ids = itertools.count(1)
        try:
            self._handshake(secret, deadline)
        except BaseException:
            self.close()
            raise

    def _handshake(self, secret: bytes | None, deadline: float) -> None:
        dialler = DiallerHandshake(
            role=Role.CLIENT, node_id=None, secret=secret, remote=self.address
        )
        self._send(0, dialler.hello, deadline)
        try:
            proof = dialler.on_challenge(self._receive(deadline).message)
            self._send(0, proof, deadline)
            dialler.on_verdict(self._receive(deadline).message)
        except TransportAuthError as exc:
            if dialler.refusal is not None:
                self._send(0, dialler.refusal, deadline)
            raise AuthError(str(exc)) from None
        except (ProtocolError, ConnectionClosed) as exc:
            raise UnreachableError(f"{self.address}: {exc}") from None
        except ConnectionLost as exc:
            raise UnreachableError(f"{exc}{TLS_HINT if self._tls else ''}") from None

    def request(
        self,
        message: Message,
        deadline: float,
        still_waiting: Callable[[], None] | None = None,
    ) -> Message:
        """The answer to `message`. While it has not come, `still_waiting` is called after
        WATCH_AFTER_S and every WATCH_EVERY_S after that; it may raise to give up."""
        correlation_id = next(self._ids)
        self._send(correlation_id, message, deadline)
        check_at = time.monotonic() + WATCH_AFTER_S if still_waiting is not None else math.inf
        while True:
            try:
                frame = self._receive(min(deadline, check_at))
            except CallTimeoutError:
                if still_waiting is None or time.monotonic() >= deadline:
                    raise
                still_waiting()
                check_at = time.monotonic() + WATCH_EVERY_S
                continue
            if frame.correlation_id == correlation_id:
                return frame.message

    def _send(self, correlation_id: int, message: Message, deadline: float) -> None:
        data = encode_frame(correlation_id, message)
        try:
            self._sock.settimeout(_left(deadline))
            self._sock.sendall(data)
        except TimeoutError:
            raise CallTimeoutError(f"{self.address}: no answer before the deadline") from None
        except ssl.SSLError as exc:  # the node refused this client's certificate
            raise AuthError(f"{self.address}: TLS refused: {tls_reason(exc)}") from None
        except OSError as exc:
            raise ConnectionLost(f"{self.address}: {exc}") from None

    def _receive(self, deadline: float):
        while True:
            try:
                frame = self._decoder.next_frame()
            except ProtocolError as exc:
                raise ConnectionLost(f"{self.address}: {exc}") from None
            if frame is not None:
                return frame
            try:
                self._sock.settimeout(_left(deadline))
                data = self._sock.recv(RECEIVE_BYTES)
            except TimeoutError:
                raise CallTimeoutError(f"{self.address}: no answer before the deadline") from None
            except ssl.SSLError as exc:
                raise AuthError(f"{self.address}: TLS refused: {tls_reason(exc)}") from None
            except OSError as exc:
                raise ConnectionLost(f"{self.address}: {exc}") from None
            if not data:
                raise ConnectionLost(f"{self.address} closed the connection")
            self._decoder.feed(data)

    def close(self) -> None:
        self._sock.close()


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise CallTimeoutError("the call timed out")
    return left
