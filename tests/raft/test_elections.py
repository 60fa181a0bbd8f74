"""Elections in the Raft core (`raft/core.py`), one rule at a time: plain calls, no trio, no
sockets. Votes and pre-votes, who may vote, campaigns and their timeouts, a leader cut off
stepping down, the election order of a node's many groups, and campaign slots."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from quorumlog.actors.replica.campaigns import CampaignSlots
from quorumlog.raft.core import RaftCore
from quorumlog.raft.election import ELECTION_BACKOFF, ELECTION_BACKOFF_MAX, election_order
from quorumlog.raft.messages import Heartbeat, TimeoutNow, VoteReply, VoteRequest
from quorumlog.raft.roles import Role
from tests.log.helpers import batch_of
from tests.raft.helpers import BOOTSTRAP, SETTINGS, elect, entries, make_core, reach_only


def test_pre_vote_and_vote_are_refused_while_a_leader_is_live():
    core = make_core()
    core.step(
        2,
        entries(2, 1),
        now=1.0,
    )
    core.take_outbox()
    pre = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=10, last_term=1, pre_vote=True, transfer=False
    )
    core.step(3, pre, now=1.1)
    assert core.take_outbox() == [
        (3, VoteReply(group=0, node_id=1, term=1, granted=False, pre_vote=True))
    ]
    real = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=10, last_term=1, pre_vote=False, transfer=False
    )
    core.step(3, real, now=1.1)
    assert core.take_outbox() == [] and core.term == 1, "ignored: no term bump, no reply"
    transfer = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=10, last_term=1, pre_vote=False, transfer=True
    )
    core.step(3, transfer, now=1.1)
    assert core.take_outbox() == [
        (3, VoteReply(group=0, node_id=1, term=2, granted=True, pre_vote=False))
    ]
    assert core.hard.dirty and core.meta.voted_for == 3, "the vote is persisted first"


def test_votes_only_for_a_log_at_least_as_up_to_date():
    core = make_core()
    core.log.append([batch_of(b"a")], term=1)
    stale = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=-1, last_term=0, pre_vote=False, transfer=False
    )
    core.step(3, stale, now=100.0)
    assert core.take_outbox() == [
        (3, VoteReply(group=0, node_id=1, term=2, granted=False, pre_vote=False))
    ]


def test_a_leader_cut_off_from_the_majority_steps_down():
    core = make_core()
    elect(core, now=10.0)
    core.tick(10.0 + SETTINGS.election_timeout_max_s + 0.01)
    assert core.role is Role.FOLLOWER and core.leader_id is None


def test_a_node_whose_disk_was_slow_campaigns_an_election_timeout_late():
    s = SETTINGS
    healthy, slow = make_core(node_id=2), make_core(node_id=3)
    slow.observe(replace(slow.conditions, campaign_late=True))
    for core in (healthy, slow):
        core.step(
            1,
            entries(1, 1),
            now=1.0,
        )
    assert healthy.election.deadline_s <= 1.0 + s.election_timeout_max_s
    assert slow.election.deadline_s >= 1.0 + s.election_timeout_max_s + s.election_timeout_min_s


def test_a_stopping_node_takes_no_leadership_but_still_votes():
    """Told its node is stopping (actors/node/shutdown.py), a core neither campaigns when
    its timer runs out nor takes a transfer; it votes, as a majority may need it to."""
    core = make_core()
    core.step(2, entries(2, 1), now=1.0)
    core.take_outbox()
    core.observe(replace(core.conditions, stopping=True))
    core.tick(core.election.deadline_s)
    assert core.role is Role.FOLLOWER and not core.take_outbox(), "no pre-vote"
    core.step(2, TimeoutNow(group=0, term=1, leader_id=2), now=core.now)
    assert core.role is Role.FOLLOWER and not core.take_outbox(), "no transfer taken"
    vote = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=10, last_term=1, pre_vote=False, transfer=True
    )
    core.step(3, vote, now=core.now)
    assert core.take_outbox() == [
        (3, VoteReply(group=0, node_id=1, term=2, granted=True, pre_vote=False))
    ]
    core.observe(replace(core.conditions, stopping=False))
    core.tick(core.election.deadline_s + 10.0)
    assert any(isinstance(m, VoteRequest) for _, m in core.take_outbox()), "campaigns again"


def test_a_replica_waiting_to_be_added_votes_for_no_one():
    """A node's new replica of a group it was moved out of (its log deleted) would
    otherwise count in a configuration from before the move that a replica left behind
    still holds: two leaders (simulation seed 10006 of the topic changes)."""
    core = make_core(config=None, term=3)
    for pre_vote in (True, False):
        request = VoteRequest(
            group=0,
            term=4,
            candidate_id=3,
            last_offset=7,
            last_term=2,
            pre_vote=pre_vote,
            transfer=False,
        )
        core.step(3, request, now=100.0)
        ((to, reply),) = core.take_outbox()
        assert to == 3 and not reply.granted
    assert core.meta.voted_for is None


# ------------------------------------------------------------- elections with many groups


def test_every_node_comes_first_in_about_a_third_of_the_groups_and_all_agree():
    voters = frozenset({1, 2, 3})
    orders = [election_order(group, voters) for group in range(3000)]
    assert all(sorted(order) == [1, 2, 3] for order in orders)
    firsts = Counter(order[0] for order in orders)
    assert all(900 < firsts[n] < 1100 for n in voters), firsts
    seconds = Counter(order[1] for order in orders if order[0] == 1)
    assert all(400 < seconds[n] < 600 for n in (2, 3)), "a lost node's groups spread too"


def _core_in_place(place: int, alive: set[int]) -> RaftCore:
    """A core of group 0 whose node stands at `place` in the group's election order."""
    node_id = election_order(0, BOOTSTRAP.voters)[place]
    core = make_core(node_id)
    reach_only(core, alive)
    return core


def test_a_voter_gives_one_turn_to_each_live_voter_before_it_in_the_order():
    turn = SETTINGS.election_timeout_max_s - SETTINGS.election_timeout_min_s
    core = _core_in_place(2, alive={1, 2, 3})
    deadline = core.election.deadline_s
    core.tick(deadline)
    assert core.role is Role.FOLLOWER and not core.take_outbox(), "the two before it go first"
    assert core.election.deadline_s == pytest.approx(deadline + 2 * turn)
    core.tick(core.election.deadline_s)
    assert core.role is Role.PRE_CANDIDATE, "their turns passed: it campaigns"


def test_a_voter_whose_node_is_down_gets_no_turn():
    first = election_order(0, BOOTSTRAP.voters)[0]
    core = _core_in_place(1, alive=set(BOOTSTRAP.voters) - {first})
    core.tick(core.election.deadline_s)
    assert core.role is Role.PRE_CANDIDATE, "the one before it is down: no wait"


def test_elections_that_find_no_leader_widen_the_timeout_until_a_leader_is_heard():
    core = make_core()
    now = 0.0
    timeouts = []
    for _ in range(12):  # pre-votes that nobody answers
        now = core.election.deadline_s
        core.tick(now)
        core.take_outbox()
        timeouts.append(core.election.deadline_s - now)
    s = SETTINGS
    assert max(timeouts[:2]) <= s.election_timeout_max_s * ELECTION_BACKOFF**2
    assert max(timeouts[6:]) > s.election_timeout_max_s * 2, timeouts
    assert max(timeouts) <= s.election_timeout_max_s * ELECTION_BACKOFF_MAX
    core.step(2, Heartbeat(group=0, term=core.term, leader_id=2, leader_commit=-1), now)
    assert core.election.deadline_s - now <= s.election_timeout_max_s, "a leader resets it"


def test_a_group_cut_off_for_hours_keeps_a_bounded_timeout():
    core = make_core()
    core.election.failed = 5_000  # 1.5**5000 overflows a float
    core.tick(core.election.deadline_s)
    timeout = core.election.deadline_s - core.now
    assert 0 < timeout <= SETTINGS.election_timeout_max_s * ELECTION_BACKOFF_MAX


def test_campaign_slots_are_taken_in_turn_and_passed_on_when_given_back():
    slots = CampaignSlots(limit=2)
    woken = []
    assert slots.take(1, lambda: woken.append(1)) and slots.take(2, lambda: woken.append(2))
    assert not slots.take(3, lambda: woken.append(3)) and slots.waiting(3)
    assert not slots.take(4, lambda: woken.append(4))
    assert slots.take(1, lambda: None), "a holder keeps its slot"
    slots.give_back(1)
    assert woken == [3] and not slots.waiting(3) and slots.take(3, lambda: None)
    assert not slots.take(5, lambda: woken.append(5)), "behind 4, which waited first"
    slots.forget(4)
    slots.give_back(2)
    assert woken == [3, 5] and slots.holders == 2
    slots.give_back(9)  # never held one: nothing changes
    assert slots.holders == 2
