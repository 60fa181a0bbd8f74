"""Quorum arithmetic for simple and joint configurations."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.membership.quorum import (
    NO_OFFSET,
    VoteResult,
    committed_offset,
    has_quorum,
    is_majority,
    majority_committed_offset,
    majority_size,
    majority_vote_result,
    vote_result,
)
from tests.membership.helpers import NODE_IDS, VOTER_SETS, configurations, joint, simple

SIZES = range(1, 8)


def subsets(nodes):
    nodes = sorted(nodes)
    for size in range(len(nodes) + 1):
        yield from (frozenset(c) for c in itertools.combinations(nodes, size))


@pytest.mark.parametrize(
    ("voter_count", "needed"), [(0, 1), (1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)]
)
def test_majority_size_is_more_than_half(voter_count, needed):
    assert majority_size(voter_count) == needed


# --- exhaustive over every subset of voters, sizes 1..7 --------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_has_quorum_exactly_when_more_than_half_of_the_voters(size):
    config = simple(range(1, size + 1), learners=[8, 9])
    for nodes in subsets(range(1, size + 1)):
        assert has_quorum(config, nodes) == (2 * len(nodes) > size)
        # Learners and strangers never make up for missing voters.
        assert has_quorum(config, nodes | {8, 9, 42}) == has_quorum(config, nodes)


@pytest.mark.parametrize("size", SIZES)
def test_committed_offset_needs_a_majority_of_voters(size):
    config = simple(range(1, size + 1), learners=[8])
    for ackers in subsets(range(1, size + 1)):
        acked = dict.fromkeys(ackers, 10) | {8: 99}  # a learner far ahead counts for nothing
        expected = 10 if 2 * len(ackers) > size else NO_OFFSET
        assert committed_offset(config, acked) == expected


@pytest.mark.parametrize("size", SIZES)
def test_committed_offset_is_the_majority_th_highest(size):
    config = simple(range(1, size + 1))
    acked = {node: 100 * node for node in range(1, size + 1)}  # node n acked 100 n
    # The highest offset held by a majority: the (size // 2 + 1)-th from the top.
    assert committed_offset(config, acked) == 100 * (size - majority_size(size) + 1)


@pytest.mark.parametrize("size", SIZES)
def test_vote_result_over_every_split_of_the_votes(size):
    voters = range(1, size + 1)
    config = simple(voters, learners=[9])
    for granted in subsets(voters):
        for rejected in subsets(frozenset(voters) - granted):
            votes = dict.fromkeys(granted, True) | dict.fromkeys(rejected, False) | {9: True}
            if 2 * len(granted) > size:
                expected = VoteResult.WON
            elif 2 * (size - len(rejected)) <= size:
                expected = VoteResult.LOST
            else:
                expected = VoteResult.PENDING
            assert vote_result(config, votes) is expected, (granted, rejected)


# --- small cases spelled out -----------------------------------------------------------


def test_single_node_commits_and_wins_alone():
    config = simple([1])
    assert committed_offset(config, {1: 5}) == 5
    assert committed_offset(config, {}) == NO_OFFSET
    assert vote_result(config, {1: True}) is VoteResult.WON
    assert vote_result(config, {1: False}) is VoteResult.LOST
    assert vote_result(config, {}) is VoteResult.PENDING
    assert has_quorum(config, {1})
    assert not has_quorum(config, set())


def test_two_voters_need_both():
    config = simple([1, 2])
    assert committed_offset(config, {1: 9, 2: 4}) == 4
    assert committed_offset(config, {1: 9}) == NO_OFFSET
    assert vote_result(config, {1: True}) is VoteResult.PENDING
    assert vote_result(config, {1: True, 2: False}) is VoteResult.LOST
    assert not has_quorum(config, {1})


def test_four_voters_need_three():
    config = simple([1, 2, 3, 4])
    assert committed_offset(config, {1: 9, 2: 8, 3: 7, 4: 1}) == 7
    assert vote_result(config, {1: True, 2: True}) is VoteResult.PENDING
    assert vote_result(config, {1: True, 2: True, 3: False, 4: False}) is VoteResult.LOST
    assert vote_result(config, {1: True, 2: True, 3: True}) is VoteResult.WON


def test_empty_inputs():
    config = simple([1, 2, 3])
    assert committed_offset(config, {}) == NO_OFFSET
    assert vote_result(config, {}) is VoteResult.PENDING
    assert not has_quorum(config, set())


def test_empty_voter_set_has_no_majority():
    # Not a valid configuration, but the arithmetic stays on the safe side.
    assert majority_committed_offset(frozenset(), {1: 5}) == NO_OFFSET
    assert majority_vote_result(frozenset(), {1: True}) is VoteResult.LOST
    assert not is_majority(frozenset(), {1})


def test_joint_commit_is_the_lower_of_both_majorities():
    config = joint(old=[1, 2, 3], new=[2, 3, 4])
    # Old majority {1, 2} reached 9; new majority needs two of {2, 3, 4}: only 5.
    acked = {1: 9, 2: 9, 3: 5, 4: 1}
    assert committed_offset(config, acked) == 5
    assert committed_offset(config, {1: 9, 2: 9}) == NO_OFFSET  # new has only node 2


def test_joint_vote_needs_both_majorities():
    config = joint(old=[1, 2, 3], new=[4, 5, 6])
    assert vote_result(config, {1: True, 2: True}) is VoteResult.PENDING
    assert vote_result(config, {1: True, 2: True, 4: True, 5: True}) is VoteResult.WON
    assert vote_result(config, {1: True, 2: True, 4: False, 5: False}) is VoteResult.LOST
    assert has_quorum(config, {1, 2, 4, 5})
    assert not has_quorum(config, {1, 2, 3, 4})


def test_joint_leader_outside_new_counts_only_in_old():
    # Seed 001: a leader that is not in C(new) keeps replicating without counting there.
    config = joint(old=[1, 2, 3], new=[2, 3, 4])
    assert committed_offset(config, {1: 9, 2: 9, 3: 2, 4: 2}) == 2


# --- properties --------------------------------------------------------------------------

ACKED = st.dictionaries(NODE_IDS | st.integers(100, 102), st.integers(-1, 50))
VOTES = st.dictionaries(NODE_IDS | st.integers(100, 102), st.booleans())


@given(configurations(), ACKED, NODE_IDS, st.integers(0, 50))
def test_committed_offset_is_monotone_in_acked_offsets(config, acked, node, increase):
    before = committed_offset(config, acked)
    acked[node] = acked.get(node, NO_OFFSET) + increase
    assert committed_offset(config, acked) >= before


@given(configurations(), ACKED)
def test_committed_offset_is_the_highest_offset_a_quorum_holds(config, acked):
    committed = committed_offset(config, acked)
    assert committed == NO_OFFSET or committed in acked.values()
    holders = {node for node, offset in acked.items() if offset >= committed}
    assert committed == NO_OFFSET or has_quorum(config, holders)
    above = {node for node, offset in acked.items() if offset > committed}
    assert not has_quorum(config, above)


@given(configurations(), ACKED, st.dictionaries(st.integers(8, 20), st.integers(-1, 99)))
def test_learners_and_strangers_never_count(config, acked, others):
    voters_acked = {node: offset for node, offset in acked.items() if config.is_voter(node)}
    outsiders = {node: offset for node, offset in others.items() if not config.is_voter(node)}
    assert committed_offset(config, acked) == committed_offset(config, voters_acked | outsiders)


@given(VOTER_SETS, VOTER_SETS, ACKED)
def test_joint_commit_implies_a_majority_commit_in_both(old, new, acked):
    committed = committed_offset(joint(old, new), acked)
    assert committed <= majority_committed_offset(old, acked)
    assert committed <= majority_committed_offset(new, acked)
    assert committed == min(
        majority_committed_offset(old, acked), majority_committed_offset(new, acked)
    )


@given(VOTER_SETS, VOTER_SETS, VOTES)
def test_joint_vote_won_implies_won_in_both_halves(old, new, votes):
    result = vote_result(joint(old, new), votes)
    halves = {majority_vote_result(old, votes), majority_vote_result(new, votes)}
    assert (result is VoteResult.WON) == (halves == {VoteResult.WON})
    assert (result is VoteResult.LOST) == (VoteResult.LOST in halves)


@given(configurations(), VOTES)
def test_vote_result_agrees_with_has_quorum(config, votes):
    granted = {node for node, vote in votes.items() if vote}
    not_rejected = {node for node in config.voters if votes.get(node) is not False}
    result = vote_result(config, votes)
    assert (result is VoteResult.WON) == has_quorum(config, granted)
    assert (result is VoteResult.LOST) == (not has_quorum(config, not_rejected))


@given(configurations(), VOTES, st.data())
def test_missing_votes_never_overturn_a_decided_election(config, votes, data):
    decided = vote_result(config, votes)
    missing = sorted(config.voters - votes.keys())
    late = data.draw(st.fixed_dictionaries({node: st.booleans() for node in missing}))
    final = vote_result(config, votes | late)
    assert final is not VoteResult.PENDING
    if decided is not VoteResult.PENDING:
        assert final is decided
