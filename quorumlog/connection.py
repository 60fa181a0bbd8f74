"""A blocking connection to one node over a plain socket, for the sync `Client`.

It runs the dialler's side of the handshake (transport/handshake.py) with the same proofs
(transport/auth.py) and frames (transport/codec.py, framing.py), one request at a time.
Every call takes an absolute deadline (time.monotonic()); the socket's timeout is what is
left of it, so no call outlives its deadline.
"""

from __future__ import annotations

import itertools
import socket
import time

from quorumlog.errors import AuthError, CallTimeoutError, UnreachableError
from transport import auth
from transport.addresses import parse_address
from transport.codec import encode_frame
from transport.errors import ProtocolError
from transport.framing import FrameDecoder
from transport.handshake import PROTOCOL_VERSION
from transport.messages import (
    Accepted,
    Challenge,
    ErrorCode,
    ErrorReply,
    Hello,
    Message,
    Proof,
    Role,
)

RECEIVE_BYTES = 256 * 1024


class ConnectionLost(Exception):
    """The connection broke; whether the last request arrived is unknown."""


class SyncConnection:
    def __init__(self, address: str, secret: bytes | None, deadline: float):
        self.address = address
        host, port = parse_address(address)
        try:
            self._sock = socket.create_connection((host, port), timeout=_left(deadline))
        except TimeoutError:
            raise CallTimeoutError(f"{address}: no connection before the deadline") from None
        except OSError as exc:
            raise UnreachableError(f"cannot connect to {address}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder()
        self._ids = itertools.count(1)
        try:
            self._handshake(secret, deadline)
        except BaseException:
            self.close()
            raise

    def _handshake(self, secret: bytes | None, deadline: float) -> None:
        hello = Hello(PROTOCOL_VERSION, Role.CLIENT, None, auth.new_nonce())
        self._send(0, hello, deadline)
        challenge = self._receive(deadline).message
        if isinstance(challenge, ErrorReply):
            raise self._refused(challenge)
        if not isinstance(challenge, Challenge):
            raise UnreachableError(f"{self.address}: unexpected {type(challenge).__name__}")
        problem = auth.listener_proof_problem(secret, hello, challenge)
        if problem is not None:
            self._send(0, ErrorReply(ErrorCode.AUTH, f"dialler refused: {problem}"), deadline)
            raise AuthError(f"{self.address}: {problem}")
        self._send(0, Proof(auth.dialler_proof(secret, hello, challenge)), deadline)
        verdict = self._receive(deadline).message
        if isinstance(verdict, ErrorReply):
            raise self._refused(verdict)
        if not isinstance(verdict, Accepted):
            raise UnreachableError(f"{self.address}: unexpected {type(verdict).__name__}")

    def _refused(self, reply: ErrorReply) -> Exception:
        if reply.code is ErrorCode.AUTH:
            return AuthError(f"{self.address}: {reply.message}")
        return UnreachableError(f"{self.address} refused the connection: {reply.message}")

    def request(self, message: Message, deadline: float) -> Message:
        correlation_id = next(self._ids)
        self._send(correlation_id, message, deadline)
        while True:
            frame = self._receive(deadline)
            if frame.correlation_id == correlation_id:
                return frame.message

    def _send(self, correlation_id: int, message: Message, deadline: float) -> None:
        data = encode_frame(correlation_id, message)
        try:
            self._sock.settimeout(_left(deadline))
            self._sock.sendall(data)
        except TimeoutError:
            raise CallTimeoutError(f"{self.address}: no answer before the deadline") from None
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
