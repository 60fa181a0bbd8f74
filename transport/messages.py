"""The transport's own messages (handshake, clients, cluster metadata): one frozen slotted
dataclass per type. Raft's messages are its own (raft/messages.py); the node registers them
with the codec (transport/codec.py `register`), which encodes any registered type alike.

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
    INVALID_RECORD = 13  # a record its topic cannot take (no key on a compacted topic)


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
class OffsetForTimeRequest:
    """The first committed offset whose record is stamped at or after `timestamp_ms`
    (log/timeindex.py), answered as a read is."""

    TAG = 49
    timestamp_ms: int
    topic: str = "default"
    partition: int = 0
    leader_only: bool = False  # as ReadRequest's


@dataclass(frozen=True, slots=True)
class OffsetForTimeReply:
    TAG = 50
    offset: int | None  # None: no committed record is stamped that late
    timestamp_ms: int | None  # that record's
    commit_offset: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class PositionRequest:
    """Where the record `offset` sits in the partition's log: its position, which Raft's
    own batches count too and which is the same on every replica (what the controller's
    trims keep); the committed end's for the offset after the last committed record.
    Answered by the leader once its term's barrier committed."""

    TAG = 51
    offset: int
    topic: str = "default"
    partition: int = 0


@dataclass(frozen=True, slots=True)
class PositionReply:
    TAG = 52
    position: int


@dataclass(frozen=True, slots=True)
class OffsetMapRequest:
    """How the partition's log counts records (log/offsets.py's translator, whole): a
    coordinator turns the log positions that consumer groups kept before offsets counted
    records into record offsets with it. Answered by the leader."""

    TAG = 53
    topic: str = "default"
    partition: int = 0


@dataclass(frozen=True, slots=True)
class OffsetMapReply:
    TAG = 54
    offset_map: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LeaderRequest:
    """Who leads a partition, as the node asked believes: a client whose leader went
    silent asks the other nodes whether they elected another (quorumlog/client/leader_watch.py)."""

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
    """The `status --json` object of one node (docs/cli.md); string keys only."""

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


# --- cluster metadata, between nodes (actors/cluster/controller.py) -------------------------------


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
    controller state applied through `applied_through` (actors/cluster/leader_table.py)."""

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
    (actors/services/heartbeats.py)."""

    TAG = 43
    seq: int  # echoed by the reply, which confirms the full entries this batch carried
    ids: bytes
    full: bytes
    # The sender's recent fsync latency, -1 if unknown (actors/services/disk_health.py).
    fsync_us: int


@dataclass(frozen=True, slots=True)
class HeartbeatBatchReply:
    """The answer to a HeartbeatBatch: `need_full` (int64 array) are groups named by id
    only whose last full entry the receiver does not know (it restarted, say)."""

    TAG = 44
    seq: int
    need_full: bytes
    fsync_us: int  # the replier's recent fsync latency, -1 if unknown


# --- consumer groups (actors/coordinator/coordinator.py) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupRequest:
    """A consumer group call: answered by the group's coordinator (the leader of the
    group's `__groups` partition) with an AdminReply, or by any other node with NOT_LEADER
    and the coordinator it believes in."""

    TAG = 45
    op: str  # "join", "heartbeat", "leave", "commit", "describe", "list", "reset_offsets"
    group: str
    args: dict[str, Any]


# --- transactions (actors/coordinator/txn_coordinator.py) ------------------------------------


@dataclass(frozen=True, slots=True)
class TxnRequest:
    """A transaction call: answered by the transactional id's coordinator (the leader of
    its `__transactions` partition) with an AdminReply, or by any other node with
    NOT_LEADER and the coordinator it believes in."""

    TAG = 55
    op: str  # "init_producer", "add_partitions", "end", "verify", "describe", "list"
    transactional_id: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TxnMarkerRequest:
    """From a transaction coordinator to a partition's leader, peers only: end the
    producer's transaction in the partition with a marker (Kafka's WriteTxnMarkers).
    Answered with an AppendReply in the log's positions."""

    TAG = 56
    producer_id: int  # the transactional producer's number and epoch (log/transactions.py)
    commit: bool
    coordinator_epoch: int
    topic: str = "default"
    partition: int = 0


Message = (
    Hello
    | Challenge
    | Proof
    | Accepted
    | ClusterId
    | AppendRequest
    | AppendReply
    | ReadRequest
    | ReadReply
    | EndOffsetRequest
    | EndOffsetReply
    | OffsetForTimeRequest
    | OffsetForTimeReply
    | PositionRequest
    | PositionReply
    | OffsetMapRequest
    | OffsetMapReply
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
    | TxnRequest
    | TxnMarkerRequest
)

# A call on one partition, answered by its replica (actors/replica/actor.py, `answer`).
PartitionCall = (
    AppendRequest
    | ReadRequest
    | EndOffsetRequest
    | OffsetForTimeRequest
    | PositionRequest
    | OffsetMapRequest
    | TxnMarkerRequest
)

# The types the codec knows before the node registers its own.
MESSAGE_TYPES: tuple[type, ...] = Message.__args__

HANDSHAKE_TYPES = frozenset({Hello, Challenge, Proof, Accepted, ClusterId})

# A reply-type frame with a correlation id answers a request of ours; any other type with a
# correlation id is a request for our handler. Reply types may also travel one-way (id 0),
# as Raft's replies do. Registered types add theirs (codec.register).
REPLY_TYPES = frozenset(
    {
        AppendReply,
        ReadReply,
        EndOffsetReply,
        OffsetForTimeReply,
        PositionReply,
        OffsetMapReply,
        LeaderReply,
        StatusReply,
        AdminReply,
        ErrorReply,
    }
)
