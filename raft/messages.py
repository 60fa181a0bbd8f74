"""Raft's messages between the replicas of a group: what the core takes in and sends out.

They are plain frozen dataclasses built by keyword. The core knows nothing of the wire:
the node registers these types with the transport's codec (actors/node/node.py), which sends a
message's fields in the order declared here after its `TAG`. Tags are part of the wire
format: never reuse or renumber one (16, a separate heartbeat reply, is retired).

Offsets are the log's own (Raft's batches take some too; readers see record offsets,
log/offsets.py), -1 where there is none (an empty log).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# prev_term of an AppendEntries whose prev_offset lies before the leader's retained log:
# everything up to it is committed (raft/follower.py).
UNKNOWN_TERM = -1


class AppendResult(enum.IntEnum):
    SUCCESS = 0
    FAILURE = 1


@dataclass(frozen=True, slots=True, kw_only=True)
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
    # With prev_term unknown: the data records before `prev_offset + 1` in the leader's log,
    # which the follower's log cannot count once it starts there.
    prev_records: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """Proves leadership and carries the commit offset; it touches no entry."""

    TAG = 15
    group: int
    term: int
    leader_id: int
    leader_commit: int
    # A ReadIndex round (raft/read_index.py): the reply carries it back; 0: none.
    read_ctx: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEntriesReply:
    """A follower's answer to an AppendEntries or (`heartbeat`) a Heartbeat: its flushed
    and dirty offsets reach the leader either way.

    On FAILURE the conflict hints let the leader skip back fast: `conflict_term` is the term
    of the follower's entry at the leader's `prev_offset` (-1 if the follower's log ends
    before it) and `conflict_offset` the first offset the follower holds in that term (its
    `last_dirty + 1` when its log is too short): the leader resumes at the end of
    `conflict_term` in its own log, or at `conflict_offset` if it has no entry of that term
    (Raft paper, end of section 5.3).
    """

    TAG = 11
    group: int
    node_id: int
    term: int
    last_flushed: int
    last_dirty: int
    result: AppendResult
    heartbeat: bool = False
    conflict_offset: int = -1
    conflict_term: int = -1
    # Where the follower's log starts: a witness that joined without the records before
    # its join may lead only once it holds what the leader holds.
    log_start: int = 0
    read_ctx: int = 0  # the Heartbeat's, answered
    # The follower's commit offset: a node the configuration no longer lists is replicated
    # to until it says it holds its removal committed (raft/reconfiguration.py).
    commit_offset: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRequest:
    TAG = 12
    group: int
    term: int  # with pre_vote, the term the candidate would take; its own is not raised
    candidate_id: int
    last_offset: int
    last_term: int
    pre_vote: bool
    transfer: bool  # a leadership transfer: granted even by nodes that heard from a leader


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteReply:
    TAG = 13
    group: int
    node_id: int
    term: int
    granted: bool
    pre_vote: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutNow:
    """Leadership transfer: the target starts an election at once."""

    TAG = 14
    group: int
    term: int
    leader_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
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


@dataclass(frozen=True, slots=True, kw_only=True)
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


RaftMessage = (
    AppendEntries
    | Heartbeat
    | AppendEntriesReply
    | VoteRequest
    | VoteReply
    | TimeoutNow
    | BackfillChunk
    | BackfillReply
)

RAFT_MESSAGES: tuple[type, ...] = RaftMessage.__args__

# Replies the transport can match to a request, though the node sends every Raft message
# one-way (the core pairs replies with what it sent).
RAFT_REPLIES = frozenset({AppendEntriesReply, VoteReply, BackfillReply})
