"""The errors the transport raises; each says whose fault it is."""

from __future__ import annotations


class TransportError(Exception):
    """Base of every error the transport raises on purpose."""


class ProtocolError(TransportError):
    """The remote side broke the wire protocol: a bad frame, body, message type or field.

    Decoding raises this and nothing else, whatever bytes it is fed.
    """


class AuthError(TransportError):
    """A handshake failed authentication: a wrong or missing proof of the cluster secret."""


class ConnectionClosed(TransportError):
    """There is no connection: it could not be made, or it ended before a reply came."""


class ConnectionRefused(ConnectionClosed):
    """No quorumlog node listens at the address: the dial was refused, or what answered
    speaks another protocol (not lost, not timed out)."""


class WrongClusterError(ConnectionClosed):
    """The node at the other end is of another cluster: the handshake refused it."""

    def __init__(self, peer_id: int | None, cluster_id: str, message: str):
        super().__init__(message)
        self.peer_id = peer_id
        self.cluster_id = cluster_id  # the other node's
