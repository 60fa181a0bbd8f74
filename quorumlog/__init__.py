"""quorumlog: a replicated log service (Raft on trio, msgpack over TCP).

from quorumlog import Client, AsyncClient, Consumer, AsyncConsumer, Record, QuorumLogError
"""

from quorumlog.aclient import AsyncClient
from quorumlog.client import Client
from quorumlog.consumer import AsyncConsumer, Consumer
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
    "AsyncConsumer",
    "AuthError",
    "CallTimeoutError",
    "Client",
    "Consumer",
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
