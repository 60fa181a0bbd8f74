"""Quorum arithmetic: commit offset, election result and "heard from a majority".

Only voters count; learners and strangers are ignored wherever they appear in the input.
In a joint configuration C(old,new) a decision needs a majority of old and a majority of
new (Raft dissertation 4.3; seed 001). A voter set of n nodes needs n // 2 + 1 of them, so
an even-sized set needs more than half (2 of 2, 3 of 4) and the empty set, which has no
majority, can commit nothing and win nothing: the safe side.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Set

from quorumlog.membership.config import Configuration, NodeId

NO_OFFSET = -1  # what a voter that acknowledged nothing counts as


class VoteResult(enum.Enum):
    WON = "won"
    LOST = "lost"
    PENDING = "pending"  # the votes still missing could decide it either way


def majority_size(voter_count: int) -> int:
    return voter_count // 2 + 1


def majority_committed_offset(voters: Set[NodeId], acked: Mapping[NodeId, int]) -> int:
    """The largest offset that a majority of `voters` has acknowledged."""
    offsets = sorted((acked.get(voter, NO_OFFSET) for voter in voters), reverse=True)
    # The majority_size-th highest offset is held by that many voters, and no higher one is.
    rank = majority_size(len(voters))
    return offsets[rank - 1] if rank <= len(offsets) else NO_OFFSET


def committed_offset(config: Configuration, acked: Mapping[NodeId, int]) -> int:
    """The largest offset acknowledged by a majority of each voter set of `config`.

    The actors pass min(match, flushed) per voter, the leader's own flushed offset included
    (Redpanda lazy flush, seed 004). Whether the batch there is of the current term is
    theirs to check (Raft 5.4.2).
    """
    return min(majority_committed_offset(voters, acked) for voters in config.voter_sets)


def majority_vote_result(voters: Set[NodeId], votes: Mapping[NodeId, bool]) -> VoteResult:
    """WON once a majority granted, LOST once a majority can no longer grant."""
    granted = sum(1 for voter in voters if votes.get(voter) is True)
    rejected = sum(1 for voter in voters if votes.get(voter) is False)
    needed = majority_size(len(voters))
    if granted >= needed:
        return VoteResult.WON
    if len(voters) - rejected < needed:
        return VoteResult.LOST
    return VoteResult.PENDING


def vote_result(config: Configuration, votes: Mapping[NodeId, bool]) -> VoteResult:
    """The election result: `votes` maps a node to granted (True) or rejected (False)."""
    results = [majority_vote_result(voters, votes) for voters in config.voter_sets]
    if VoteResult.LOST in results:
        return VoteResult.LOST
    if all(result is VoteResult.WON for result in results):
        return VoteResult.WON
    return VoteResult.PENDING


def is_majority(voters: Set[NodeId], nodes: Set[NodeId]) -> bool:
    return sum(1 for voter in voters if voter in nodes) >= majority_size(len(voters))


def has_quorum(config: Configuration, nodes: Set[NodeId]) -> bool:
    """Whether `nodes` hold a majority of each voter set (e.g. "the leader heard from a
    majority within an election timeout", counting itself)."""
    return all(is_majority(voters, nodes) for voters in config.voter_sets)
