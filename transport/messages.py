"""Every message on the wire: one frozen slotted dataclass per type.

A frame body is the msgpack array `[type_tag, correlation_id, *fields]`, the fields in the
order they are declared here (see codec.py). Tags are part of the wire format: never reuse
or renumber one. Offsets are record offsets, -1 where there is none (an empty log).

Batches travel as one `bytes` of whole batches concatenated, exactly as they sit on disk
(log/batch.py); the transport never looks inside them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Role(enum.IntEnum):
    """What the remote end of a connection is: another node, or a client."""

    PEER = 1
    CLIENT = 2


class AppendResult(enum.IntEnum):
    SUCCESS = 0
    FAILURE = 1
    # The node does not (yet, or any more) serve the group named in the request.
    GROUP_UNAVAILABLE = 2


class Acks(enum.IntEnum):
    """When an append is answered (seed 004): once committed, once on the leader, on receipt."""

    QUORUM = 0
    LEADER = 1
    NONE = 2


class ErrorCode(enum.IntEnum):
    NOT_LEADER = 1
    OFFSET_OUT_OF_RANGE = 2
    TIMEOUT = 3
    PROTOCOL = 4
    AUTH = 5
    REFUSED = 6
    TOO_LARGE = 7
    STEPPING_DOWN = 8
    UNKNOWN = 9
    BUSY = 10  # another configuration change or a leadership transfer is under way: retry
    UNKNOWN_TOPIC = 11  # no such topic or partition
    NOT_MEMBER = 12  # a consumer that is not (or no longer) a member of its group: rejoin


# --- handshake (transport/handshake.py); never seen by handlers -------------------------


@dataclass(frozen=True, slots=True)
class Hello:
    """First frame of a connection, from the side that dialled."""

    TAG = 1
    protocol_version: int
    role: Role
    node_id: int | None  # None for a client
    nonce: bytes


@dataclass(frozen=True, slots=True)
class Challenge:
    """The listener's answer to Hello: who it is, its nonce, and its proof (b"" without secret)."""

    TAG = 2
    node_id: int
    nonce: bytes
    proof: bytes


@dataclass(frozen=True, slots=True)
class Proof:
    """The dialler's proof of the secret (b"" without secret)."""

    TAG = 3
    proof: bytes


@dataclass(frozen=True, slots=True)
class Accepted:
    """The listener accepted the proof; the connection now carries messages."""

    TAG = 4


@dataclass(frozen=True, slots=True)
class ClusterId:
    """Between nodes only, after Accepted: each side's cluster (transport/identity.py);
    None for a node whose cluster has not named itself yet, or that has not learned it."""

    TAG = 5
    cluster_id: str | None


# --- Raft, between nodes ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendEntries:
    TAG = 10
    group: int
    term: int
    leader_id: int
    prev_offset: int
    prev_term: int
    leader_commit: int
    batches: bytes  # whole batches, concatenated; b"" carries only offsets
    flush: bool  # ask the follower to fsync before it replies (recovery sends False)
    # With prev_term unknown (the follower starts its log again at the leader's log start):
    # a config batch of the committed configuration, when retention removed its entry from
    # the leader's log, so that the follower does not go on with an older one; else b"".
    base_config: bytes = b""


@dataclass(frozen=True, slots=True)
class AppendEntriesReply:
    """A follower's answer; on FAILURE the conflict hints let the leader skip back fast.

    `conflict_term` is the term of the follower's entry at the leader's `prev_offset`
    (-1 if the follower's log ends before it) and `conflict_offset` the first offset the
    follower holds in that term (its `last_dirty + 1` when its log is too short): the
    leader resumes at the end of `conflict_term` in its own log, or at `conflict_offset`
    if it has no entry of that term (Raft paper, end of section 5.3).
    """

    TAG = 11
    group: int
    node_id: int
    term: int
    last_flushed: int
    last_dirty: int
    result: AppendResult
    conflict_offset: int
    conflict_term: int
    # Where the follower's log starts: a witness that joined without the records before
    # its join may lead only once it holds what the leader holds.
    log_start: int = 0


@dataclass(frozen=True, slots=True)
class VoteRequest:
    TAG = 12
    group: int
    term: int  # with pre_vote, the term the candidate would take; its own is not raised
    candidate_id: int
    last_offset: int
    last_term: int
    pre_vote: bool
    transfer: bool  # a leadership transfer: granted even by nodes that heard from a leader


@dataclass(frozen=True, slots=True)
class VoteReply:
    TAG = 13
    group: int
    node_id: int
    term: int
    granted: bool
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer: the target starts an election at once."""

    TAG = 14
    group: int
    term: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """An AppendEntries without batches; it still proves leadership and carries the commit."""

    TAG = 15
    group: int
    term: int
    leader_id: int
    prev_offset: int
    prev_term: int
    leader_commit: int


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """Same fields as AppendEntriesReply: flushed offsets reach the leader by heartbeats too."""

    TAG = 16
    group: int
    node_id: int
    term: int
    last_flushed: int
    last_dirty: int
    result: AppendResult
    conflict_offset: int
    conflict_term: int
    log_start: int = 0


@dataclass(frozen=True, slots=True)
class BackfillChunk:
    """Records before a follower's log start (a witness becoming a full replica): whole
    batches from `offset` on, of the copy of [start, end) (raft/backfill.py)."""

    TAG = 17
    group: int
    term: int
    leader_id: int
    start: int
    end: int
    offset: int
    batches: bytes


@dataclass(frozen=True, slots=True)
class BackfillReply:
    """Where the follower's copy stands: it holds [start, next_offset). `gap`: a chunk
    came after a lost one and was dropped, so send again from `next_offset`."""

    TAG = 18
    group: int
    node_id: int
    term: int
    start: int
    next_offset: int
    log_start: int
    gap: bool


# --- clients ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendRequest:
    TAG = 30
    batches: bytes
    acks: Acks
    producer_id: int  # -1 without an idempotent producer
    producer_seq: int
    topic: str = "default"
    partition: int = 0


@dataclass(frozen=True, slots=True)
class AppendReply:
    """Where the batches landed and the durability reached when the leader answered."""

    TAG = 31
    first_offset: int | None  # None with acks=none: answered before offsets were assigned
    last_offset: int | None
    commit_offset: int
    majority_flushed_offset: int
    majority_dirty_offset: int


@dataclass(frozen=True, slots=True)
class ReadRequest:
    TAG = 32
    offset: int
    max_bytes: int
    topic: str = "default"
    partition: int = 0
    # Answered by the leader only, once its term's barrier committed (so its commit offset
    # covers every acknowledged append); else NOT_LEADER. A direct client sends False: any
    # replica answers up to the commit offset it knows.
    leader_only: bool = False


@dataclass(frozen=True, slots=True)
class ReadReply:
    TAG = 33
    batches: bytes  # whole batches from `offset`'s batch on, b"" at the committed end
    commit_offset: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class EndOffsetRequest:
    TAG = 34
    linearizable: bool  # confirm leadership with a quorum before answering
    topic: str = "default"
    partition: int = 0
    leader_only: bool = False  # as ReadRequest's


@dataclass(frozen=True, slots=True)
class EndOffsetReply:
    TAG = 35
    commit_offset: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class LeaderRequest:
    """Who leads a partition, as the node asked believes: a client whose leader went
    silent asks the other nodes whether they elected another (quorumlog/leader_watch.py)."""

    TAG = 46
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class LeaderReply:
    TAG = 47
    leader_id: int | None  # None: no leader known (an election is on, say)
    leader_address: str | None
    term: int  # of that belief; -1 when the node knows nothing of the partition


@dataclass(frozen=True, slots=True)
class StatusRequest:
    TAG = 36


@dataclass(frozen=True, slots=True)
class StatusReply:
    """The `status --json` object of one node (the README's command line); string keys only."""

    TAG = 37
    status: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AdminRequest:
    TAG = 38
    op: str  # "add_member", "remove_member", "transfer_leader", ...
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AdminReply:
    TAG = 39
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """A definite refusal; `leader_id`/`leader_address` are the hint for NOT_LEADER."""

    TAG = 40
    code: ErrorCode
    message: str
    leader_id: int | None = None
    leader_address: str | None = None


# --- cluster metadata, between nodes (actors/controller.py) -------------------------------


@dataclass(frozen=True, slots=True)
class LeaderUpdates:
    """One-way: who leads partitions, as the sender's replicas see it. `entries` is the
    msgpack array of [topic, partition, leader_id, term, revision]; `full` marks a report of
    every replica the sender hosts (sent to each new controller leader)."""

    TAG = 41
    entries: bytes
    full: bool


@dataclass(frozen=True, slots=True)
class LeaderDigest:
    """One-way, from the controller's leader: a hash of its leader table, as of its
    controller state applied through `applied_through` (actors/leader_sync.py)."""

    TAG = 48
    digest: bytes
    applied_through: int


@dataclass(frozen=True, slots=True)
class PartitionsRequest:
    """The state of the sender's replicas of `topic`, answered with a StatusReply whose
    status maps each partition (as a string) to its replica's status."""

    TAG = 42
    topic: str


@dataclass(frozen=True, slots=True)
class HeartbeatBatch:
    """One-way, once per heartbeat interval from a node to each peer: every group the
    sender leads with that peer as a member. `ids` (int64 little-endian array) are groups
    whose term and commit offset did not change since the last batch to this peer; `full`
    is the msgpack array of [group, term, commit_offset] of the others
    (actors/heartbeats.py)."""

    TAG = 43
    seq: int  # echoed by the reply, which confirms the full entries this batch carried
    ids: bytes
    full: bytes
    fsync_us: int  # the sender's recent fsync latency, -1 if unknown (actors/disk_health.py)


@dataclass(frozen=True, slots=True)
class HeartbeatBatchReply:
    """The answer to a HeartbeatBatch: `need_full` (int64 array) are groups named by id
    only whose last full entry the receiver does not know (it restarted, say)."""

    TAG = 44
    seq: int
    need_full: bytes
    fsync_us: int  # the replier's recent fsync latency, -1 if unknown


# --- consumer groups (actors/coordinator.py) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupRequest:
    """A consumer group call: answered by the group's coordinator (the leader of the
    group's `__groups` partition) with an AdminReply, or by any other node with NOT_LEADER
    and the coordinator it believes in."""

    TAG = 45
    op: str  # "join", "heartbeat", "leave", "commit", "describe", "list", "reset_offsets"
    group: str
    args: dict[str, Any]


Message = (
    Hello
    | Challenge
    | Proof
    | Accepted
    | ClusterId
    | AppendEntries
    | AppendEntriesReply
    | VoteRequest
    | VoteReply
    | TimeoutNow
    | Heartbeat
    | HeartbeatReply
    | BackfillChunk
    | BackfillReply
    | AppendRequest
    | AppendReply
    | ReadRequest
    | ReadReply
    | EndOffsetRequest
    | EndOffsetReply
    | LeaderRequest
    | LeaderReply
    | StatusRequest
    | StatusReply
    | AdminRequest
    | AdminReply
    | ErrorReply
    | LeaderUpdates
    | LeaderDigest
    | PartitionsRequest
    | HeartbeatBatch
    | HeartbeatBatchReply
    | GroupRequest
)

MESSAGE_TYPES: tuple[type, ...] = Message.__args__

HANDSHAKE_TYPES = frozenset({Hello, Challenge, Proof, Accepted, ClusterId})

# A reply-type frame with a correlation id answers a request of ours; any other type with a
# correlation id is a request for our handler. Reply types may also travel one-way (id 0),
# as Raft's replies do.
REPLY_TYPES = frozenset(
    {
        AppendEntriesReply,
        VoteReply,
        HeartbeatReply,
        BackfillReply,
        AppendReply,
        ReadReply,
        EndOffsetReply,
        LeaderReply,
        StatusReply,
        AdminReply,
        ErrorReply,
    }
)
