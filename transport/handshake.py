"""The handshake that opens every TCP connection, before any handler sees a message.

    dialler  -> Hello(version, role, node_id, nonce)
    listener -> Challenge(node_id, nonce, listener proof)   or ErrorReply
    dialler  -> Proof(dialler proof)                        or ErrorReply(AUTH) if the
                                                               listener's proof is wrong
    listener -> Accepted()                                  or ErrorReply(AUTH)
  between nodes only:
    dialler  -> ClusterId(dialler's cluster)
    listener -> ClusterId(listener's cluster)

Whichever side finds a fault tells the other in an ErrorReply before it closes, so both
ends log the same clear reason; the dialler raises AuthError for an authentication fault.
Nodes compare clusters (transport/identity.py) only once the secret is proved, so that
nobody without it can make a node believe it is foreign; different ones part there, each
side raising WrongClusterError, before either sees a Raft message. Clients never take
that step, so clients and nodes of versions from before cluster ids still shake hands.
Bytes read past the last handshake frame stay in the decoder for the connection.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import NoReturn

import trio

from quorumlog.transport import auth
from quorumlog.transport.codec import encode_frame
from quorumlog.transport.errors import (
    AuthError,
    ConnectionClosed,
    ProtocolError,
    TransportError,
    WrongClusterError,
)
from quorumlog.transport.framing import FrameDecoder
from quorumlog.transport.identity import ClusterIdentity
from quorumlog.transport.messages import (
    Accepted,
    Challenge,
    ClusterId,
    ErrorCode,
    ErrorReply,
    Hello,
    Message,
    Proof,
    Role,
)
from quorumlog.transport.network import ConnectionInfo
from quorumlog.transport.tls import CLOSED_HINT, tls_reason

PROTOCOL_VERSION = 1


class DiallerHandshake:
    """The dialler's side as plain rules (no I/O), for the trio dialler below and the
    blocking client (quorumlog/connection.py) alike:

        hello -> send; on_challenge(reply) -> send what it returns; on_verdict(reply).

    A fault raises AuthError, ProtocolError or ConnectionClosed; for an untrusted listener,
    `refusal` is set first: the ErrorReply to send it before closing.
    """

    def __init__(self, *, role: Role, node_id: int | None, secret: bytes | None, remote: str):
        self.hello = Hello(PROTOCOL_VERSION, role, node_id, auth.new_nonce())
        self.refusal: ErrorReply | None = None
        self._secret = secret
        self._remote = remote
        self._challenge: Challenge | None = None

    def on_challenge(self, message: Message) -> Proof:
        match message:
            case Challenge():
                _check_nonce(message.nonce)
            case _:
                _raise_unexpected(message, "Challenge")
        problem = auth.listener_proof_problem(self._secret, self.hello, message)
        if problem is not None:
            self.refusal = ErrorReply(ErrorCode.AUTH, f"dialler refused: {problem}")
            raise AuthError(f"{self._remote}: {problem}")
        self._challenge = message
        return Proof(auth.dialler_proof(self._secret, self.hello, message))

    def on_verdict(self, message: Message) -> ConnectionInfo:
        assert self._challenge is not None, "the challenge comes first"
        match message:
            case Accepted():
                return ConnectionInfo(
                    role=Role.PEER, node_id=self._challenge.node_id, remote=self._remote
                )
            case _:
                _raise_unexpected(message, "Accepted")


async def dial_handshake(
    stream: trio.abc.Stream,
    decoder: FrameDecoder,
    *,
    role: Role,
    node_id: int | None,
    secret: bytes | None,
    remote: str,
    identity: ClusterIdentity | None = None,
) -> ConnectionInfo:
    """Run the dialler's side; returns who the listener is."""
    dialler = DiallerHandshake(role=role, node_id=node_id, secret=secret, remote=remote)
    await _send(stream, dialler.hello)
    try:
        proof = dialler.on_challenge(await _receive(stream, decoder))
    except AuthError:
        if dialler.refusal is not None:
            await _send_quietly(stream, dialler.refusal)
        raise
    await _send(stream, proof)
    info = dialler.on_verdict(await _receive(stream, decoder))
    if role is Role.PEER:
        await _compare_clusters(stream, decoder, identity, info.node_id, remote, dialler=True)
    return info


async def listen_handshake(
    stream: trio.abc.Stream,
    decoder: FrameDecoder,
    *,
    node_id: int,
    secret: bytes | None,
    remote: str,
    identity: ClusterIdentity | None = None,
) -> ConnectionInfo:
    """Run the listener's side; returns who dialled."""
    try:
        hello = await _receive(stream, decoder)
        match hello:
            case Hello():
                if hello.protocol_version != PROTOCOL_VERSION:
                    raise ProtocolError(f"unsupported protocol version {hello.protocol_version}")
                _check_nonce(hello.nonce)
            case _:
                _raise_unexpected(hello, "Hello")
        if (hello.role is Role.PEER) != (hello.node_id is not None):
            raise ProtocolError("a peer must give its node id and a client must not")
        nonce = auth.new_nonce()
        proof = auth.listener_proof(secret, hello, node_id, nonce)
        challenge = Challenge(node_id, nonce, proof)
        await _send(stream, challenge)
        answer = await _receive(stream, decoder)
        match answer:
            case Proof():
                pass
            case _:
                _raise_unexpected(answer, "Proof")
    except ProtocolError as exc:
        await _send_quietly(stream, ErrorReply(ErrorCode.PROTOCOL, str(exc)))
        raise
    problem = auth.dialler_proof_problem(secret, hello, challenge, answer.proof)
    if problem is not None:
        await _send_quietly(stream, ErrorReply(ErrorCode.AUTH, problem))
        raise AuthError(problem)
    await _send(stream, Accepted())
    if hello.role is Role.PEER:
        await _compare_clusters(stream, decoder, identity, hello.node_id, remote, dialler=False)
    return ConnectionInfo(role=hello.role, node_id=hello.node_id, remote=remote)


async def _compare_clusters(
    stream: trio.abc.Stream,
    decoder: FrameDecoder,
    identity: ClusterIdentity | None,
    peer_id: int | None,
    remote: str,
    *,
    dialler: bool,
) -> None:
    """Each node states its cluster, the dialler first; different ones part here."""
    mine = ClusterId(None if identity is None else identity.cluster_id)
    if dialler:
        await _send(stream, mine)
    theirs = await _receive(stream, decoder)
    if not isinstance(theirs, ClusterId):
        _raise_unexpected(theirs, "ClusterId")
    if not dialler:
        await _send(stream, mine)
    if (
        identity is not None
        and theirs.cluster_id is not None
        and identity.differs(theirs.cluster_id)
    ):
        identity.note_foreign(peer_id, theirs.cluster_id)
        refusal = identity.refusal(peer_id, theirs.cluster_id)
        raise WrongClusterError(peer_id, theirs.cluster_id, f"{remote}: {refusal}")


async def refuse(stream: trio.abc.Stream, reason: str) -> None:
    """Tell a dialler it will not be served (before any handshake), then let it go."""
    await _send_quietly(stream, ErrorReply(ErrorCode.REFUSED, reason))


def _check_nonce(nonce: bytes) -> None:
    # A short nonce would let a replayed proof pass.
    if len(nonce) != auth.NONCE_BYTES:
        raise ProtocolError(f"nonce of {len(nonce)} bytes, not {auth.NONCE_BYTES}")


def _raise_unexpected(message: Message, expected: str) -> NoReturn:
    match message:
        case ErrorReply(code=ErrorCode.AUTH):
            raise AuthError(message.message)
        case ErrorReply():
            raise ConnectionClosed(f"refused ({message.code.name.lower()}): {message.message}")
        case _:
            raise ProtocolError(f"expected {expected}, got {type(message).__name__}")


async def _send(stream: trio.abc.Stream, message: Message) -> None:
    try:
        await stream.send_all(encode_frame(0, message))
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise _closed(exc) from None


async def _send_quietly(stream: trio.abc.Stream, message: Message) -> None:
    # Telling the other side why is a courtesy: the connection closes either way.
    with contextlib.suppress(ConnectionClosed):
        await _send(stream, message)


async def _receive(stream: trio.abc.Stream, decoder: FrameDecoder) -> Message:
    while (frame := decoder.next_frame()) is None:
        try:
            data = await stream.receive_some()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _closed(exc) from None
        if not data:
            raise ConnectionClosed("closed during the handshake")
        decoder.feed(data)
    return frame.message


def _closed(exc: BaseException) -> TransportError:
    """A TLS handshake that failed (a certificate refused, on either side) is an
    authentication fault, not a connection to retry."""
    if isinstance(exc.__cause__, ssl.SSLEOFError):
        return AuthError(f"TLS refused: the node closed the connection: {CLOSED_HINT}")
    if isinstance(exc.__cause__, ssl.SSLError):
        return AuthError(f"TLS refused: {tls_reason(exc.__cause__)}")
    return ConnectionClosed(f"closed during the handshake: {_why(exc)}")


def _why(exc: BaseException) -> str:
    # trio raises BrokenResourceError from the OSError or SSLError that says what happened.
    cause = exc.__cause__ or exc
    return str(cause) or type(cause).__name__
