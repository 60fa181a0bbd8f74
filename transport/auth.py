"""HMAC-SHA256 challenge-response: each side proves it knows the secret; it never travels.

Both nonces and the identities from Hello and Challenge are bound into each proof, and the
two directions use different labels, so a proof cannot be replayed, reflected back to its
sender, or moved to another connection. Without a secret the proofs are empty.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import msgpack

from quorumlog.transport.messages import Challenge, Hello

NONCE_BYTES = 32
_SERVER_LABEL = "quorumlog-listener-v1"
_CLIENT_LABEL = "quorumlog-dialler-v1"


def new_nonce() -> bytes:
    # Unpredictable on purpose: a seeded generator would let anyone precompute proofs.
    # Simulations never run a handshake, so this costs no determinism.
    return secrets.token_bytes(NONCE_BYTES)


def listener_proof(
    secret: bytes | None, hello: Hello, node_id: int, listener_nonce: bytes
) -> bytes:
    if secret is None:
        return b""
    return _mac(secret, _SERVER_LABEL, hello, node_id, listener_nonce)


def dialler_proof(secret: bytes | None, hello: Hello, challenge: Challenge) -> bytes:
    if secret is None:
        return b""
    return _mac(secret, _CLIENT_LABEL, hello, challenge.node_id, challenge.nonce)


def listener_proof_problem(secret: bytes | None, hello: Hello, challenge: Challenge) -> str | None:
    """Why the dialler must not trust this listener, or None if it may."""
    if secret is None:
        return (
            "missing secret: the node requires one and none was given" if challenge.proof else None
        )
    if not challenge.proof:
        return "missing secret: the node has no secret configured but this side has one"
    expected = listener_proof(secret, hello, challenge.node_id, challenge.nonce)
    if not hmac.compare_digest(expected, challenge.proof):
        return "wrong secret: the node proved a different one"
    return None


def dialler_proof_problem(
    secret: bytes | None, hello: Hello, challenge: Challenge, proof: bytes
) -> str | None:
    """Why the listener must refuse this dialler, or None if it may serve it."""
    if secret is None:
        return None if not proof else "this node has no secret but the dialler sent a proof"
    if not proof:
        return "wrong or missing secret: no proof given"
    if not hmac.compare_digest(dialler_proof(secret, hello, challenge), proof):
        return "wrong or missing secret: the proof does not match"
    return None


def _mac(secret: bytes, label: str, hello: Hello, node_id: int, listener_nonce: bytes) -> bytes:
    transcript = msgpack.packb(
        (
            label,
            hello.protocol_version,
            hello.role,
            hello.node_id,
            hello.nonce,
            node_id,
            listener_nonce,
        )
    )
    return hmac.new(secret, transcript, hashlib.sha256).digest()
