"""quorumlog: a replicated log service (Raft on trio, msgpack over TCP).

from quorumlog import Client, AsyncClient, Consumer, AsyncConsumer, Record, QuorumLogError
"""

import sys

try:  # the layers live beside this folder and are mapped under it by the installed package
    import quorumlog.log  # noqa: F401
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"quorumlog is not installed for {sys.executable}: it found the source folder "
        f"{__path__[0]} but not the package ({exc.name} is missing). Run the interpreter "
        "it is installed in (.venv/bin/python; for Spark workers, PYSPARK_PYTHON), or "
        "start Python from another folder.",
        name=exc.name,
    ) from None

from quorumlog.client.aclient import AsyncClient
from quorumlog.client.client import Client
from quorumlog.client.consumer import AsyncConsumer, Consumer
from quorumlog.client.errors import (
    AuthError,
    CallTimeoutError,
    GroupActiveError,
    InvalidRecordError,
    NotLeaderError,
    NotMemberError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    QuorumLogError,
    RefusedError,
    TooLargeError,
    TopicExistsError,
    UnknownGroupError,
    UnknownTopicError,
    UnreachableError,
)
from quorumlog.client.protocol import AppendResult, Record

__all__ = [
    "AppendResult",
    "AsyncClient",
    "AsyncConsumer",
    "AuthError",
    "CallTimeoutError",
    "Client",
    "Consumer",
    "GroupActiveError",
    "InvalidRecordError",
    "NotLeaderError",
    "NotMemberError",
    "OffsetOutOfRangeError",
    "OutcomeUnknownError",
    "QuorumLogError",
    "Record",
    "RefusedError",
    "TooLargeError",
    "TopicExistsError",
    "UnknownGroupError",
    "UnknownTopicError",
    "UnreachableError",
]
