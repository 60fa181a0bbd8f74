"""The errors a client call can end with; all are QuorumLogError."""

from __future__ import annotations


class QuorumLogError(Exception):
    """A call failed definitely; the message says why in one line."""


class UnreachableError(QuorumLogError):
    """No broker could be reached before the deadline (or every one refused the
    connection: nothing listens there)."""

    def __init__(self, message: str, *args, refused: bool = False, **kwargs):
        super().__init__(message, *args, **kwargs)
        self.refused = refused  # nothing listened at the broker's address


class CallTimeoutError(QuorumLogError):
    """The call did not finish before its timeout."""


class NotLeaderError(QuorumLogError):
    """The node is not the leader (raised only with direct=True; otherwise redirected)."""

    def __init__(
        self, message: str, leader_id: int | None = None, leader_address: str | None = None
    ):
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_address = leader_address


class OffsetOutOfRangeError(QuorumLogError):
    """The offset is before the log start."""


class AuthError(QuorumLogError):
    """Wrong or missing cluster secret."""


class TooLargeError(QuorumLogError):
    """A record or an append exceeds the size limits."""


class OutcomeUnknownError(QuorumLogError):
    """The append may or may not have been written (connection lost after sending)."""


class UnknownTopicError(QuorumLogError):
    """No such topic, or no such partition of it."""


class NotMemberError(QuorumLogError):
    """A consumer is no longer a member of its group (it left, or its session expired)."""


class InvalidRecordError(QuorumLogError, ValueError):
    """A record its topic cannot take: one without a key on a compacted topic (Kafka's
    INVALID_RECORD). Sent again it is refused again."""


class RefusedError(QuorumLogError):
    """The cluster refused the call as asked: its arguments (a bad name, more replicas than
    nodes, fewer partitions than now), or the state it found. Sent again unchanged it is
    refused again. The subclasses below are the refusals a program acts on."""


class TopicExistsError(RefusedError):
    """`create_topic` of a name that is taken (Kafka's TopicExistsException)."""


class UnknownGroupError(RefusedError):
    """No such consumer group (describe, reset or delete one that was never used)."""


class GroupActiveError(RefusedError):
    """The consumer group has active members: stop them first (`reset_offsets`,
    `delete_group`)."""
