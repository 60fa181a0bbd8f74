"""quorumlog: a replicated log service (Raft on trio, msgpack over TCP).

from quorumlog import Client, AsyncClient, Record, QuorumLogError
"""

from quorumlog.aclient import AsyncClient
from quorumlog.client import Client
from quorumlog.errors import (
    AuthError,
    CallTimeoutError,
    NotLeaderError,
    NotMemberError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    QuorumLogError,
    TooLargeError,
    UnknownTopicError,
    UnreachableError,
)
from quorumlog.protocol import AppendResult, Record

__all__ = [
    "AppendResult",
    "AsyncClient",
    "AuthError",
    "CallTimeoutError",
    "Client",
    "NotLeaderError",
    "NotMemberError",
    "OffsetOutOfRangeError",
    "OutcomeUnknownError",
    "QuorumLogError",
    "Record",
    "TooLargeError",
    "UnknownTopicError",
    "UnreachableError",
]
