"""The driver plans: add, remove, move, replace, set, and the rollback before the joint entry."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from quorumlog.membership.changes import (
    ChangeInProgressError,
    ConfigChangeError,
    check_safe_transition,
)
from quorumlog.membership.driver import (
    AddLearner,
    Demote,
    EnterJoint,
    LeaveJoint,
    MakeElectable,
    PromoteAgain,
    Remove,
    TransferLeadership,
    WaitCaughtUp,
    WaitPromoted,
    plan_add,
    plan_demote,
    plan_move,
    plan_promote,
    plan_remove,
    plan_replace,
    plan_set,
    rollback_steps,
)
from tests.membership.helpers import NODE_IDS, VOTER_SETS, address, joint, simple
from tests.membership.plans import apply_step, run_plan

THREE = simple([1, 2, 3])


def test_add_is_a_learner_to_promote():
    assert plan_add(THREE, 4, address(4), wait_promoted=False) == (
        AddLearner(4, address(4), promote=True),
    )
    assert plan_add(THREE, 4, address(4), wait_promoted=True) == (
        AddLearner(4, address(4), promote=True),
        WaitPromoted(4),
    )
    final = run_plan(THREE, plan_add(THREE, 4, address(4), wait_promoted=True))[-1]
    assert final.voters == {1, 2, 3, 4}


def test_add_refuses_what_can_never_succeed():
    with pytest.raises(ConfigChangeError, match="node 3 is already a voter"):
        plan_add(THREE, 3, address(3), wait_promoted=False)


def test_remove_a_follower():
    assert plan_remove(THREE, 3, leader_id=1) == (Remove(3),)
    assert plan_remove(THREE, 3, leader_id=None) == (Remove(3),)


def test_remove_the_leader_transfers_leadership_first():
    # Seed 000: "the leader transfers configuration ownership to the most up-to-date follower".
    assert plan_remove(THREE, 1, leader_id=1) == (
        TransferLeadership(1, frozenset({2, 3})),
        Remove(1),
    )


def test_remove_refuses_the_last_voter_and_strangers():
    with pytest.raises(ConfigChangeError, match="would leave no voter"):
        plan_remove(simple([1]), 1, leader_id=1)
    with pytest.raises(ConfigChangeError, match="node 9 is not a member"):
        plan_remove(THREE, 9, leader_id=1)


def test_move_is_add_then_remove():
    assert plan_move(THREE, 1, 4, address(4), leader_id=2) == (
        AddLearner(4, address(4), promote=True),
        WaitPromoted(4),
        Remove(1),
    )
    # Moving the leader's replica: the new voter is a transfer candidate by then.
    assert plan_move(THREE, 1, 4, address(4), leader_id=1)[2] == TransferLeadership(
        1, frozenset({2, 3, 4})
    )
    with pytest.raises(ConfigChangeError, match="node 5 is not a voter"):
        plan_move(THREE, 5, 4, address(4), leader_id=1)


def test_replace_goes_through_joint_consensus():
    steps = plan_replace(THREE, 1, 4, address(4), leader_id=2)
    assert steps == (
        AddLearner(4, address(4), promote=False),
        WaitCaughtUp(4),
        EnterJoint(((2, address(2)), (3, address(3)), (4, address(4)))),
        LeaveJoint(),
    )
    path = run_plan(THREE, steps)
    assert [c.to_json()["joint"] for c in path] == [
        None,
        None,
        {"old": [1, 2, 3], "new": [2, 3, 4]},
        None,
    ]
    assert path[-1].voters == {2, 3, 4} and path[-1].learners == frozenset()


def test_replacing_the_leader_moves_leadership_before_the_joint_entry():
    steps = plan_replace(THREE, 1, 4, address(4), leader_id=1)
    assert steps[2] == TransferLeadership(1, frozenset({2, 3}))
    assert isinstance(steps[3], EnterJoint)


def test_replace_with_an_existing_learner_skips_adding_it():
    config = simple([1, 2, 3], learners=[4])
    assert plan_replace(config, 1, 4, address(4), leader_id=2)[0] == WaitCaughtUp(4)
    with pytest.raises(ConfigChangeError, match=r"node 4 is at 10\.0\.0\.4:7001, not x:1"):
        plan_replace(config, 1, 4, "x:1", leader_id=2)


def test_set_grows_and_shrinks():
    five = {n: address(n) for n in range(1, 6)}
    grown = run_plan(THREE, plan_set(THREE, five, leader_id=1))[-1]
    assert grown.voters == {1, 2, 3, 4, 5}
    three = {n: address(n) for n in range(1, 4)}
    assert run_plan(grown, plan_set(grown, three, leader_id=5))[-1].voters == {1, 2, 3}


def test_set_to_all_new_nodes_cannot_transfer_and_relies_on_step_down():
    # No caught-up voter stays: the old leader steps down once C(new) commits (seed 001).
    steps = plan_set(THREE, {n: address(n) for n in (4, 5, 6)}, leader_id=1)
    assert not any(isinstance(step, TransferLeadership) for step in steps)
    assert run_plan(THREE, steps)[-1].voters == {4, 5, 6}


def test_set_removes_other_learners_at_the_end():
    config = simple([1, 2, 3], learners=[7])
    steps = plan_set(config, {n: address(n) for n in (1, 2, 4)}, leader_id=1)
    assert steps[-2:] == (LeaveJoint(), Remove(7))
    # Already the right voters: only the learner goes, without any joint configuration.
    assert plan_set(config, {n: address(n) for n in (1, 2, 3)}, leader_id=1) == (Remove(7),)
    assert plan_set(THREE, {n: address(n) for n in (1, 2, 3)}, leader_id=1) == ()


def test_plans_wait_while_a_joint_change_is_in_progress():
    config = joint(old=[1, 2, 3], new=[2, 3, 4])
    with pytest.raises(ChangeInProgressError):
        plan_set(config, {1: address(1)}, leader_id=1)
    with pytest.raises(ChangeInProgressError):
        plan_replace(config, 2, 5, address(5), leader_id=1)


def test_rollback_before_the_joint_entry_removes_the_added_learner():
    steps = plan_replace(THREE, 1, 4, address(4), leader_id=2)
    after_add = apply_step(THREE, steps[0])  # then WaitCaughtUp timed out
    assert rollback_steps(THREE, after_add) == (Remove(4),)
    assert run_plan(after_add, rollback_steps(THREE, after_add))[-1].members == THREE.members
    assert rollback_steps(THREE, THREE) == ()  # failed before anything was appended


def test_no_rollback_once_joint():
    joint_config = run_plan(THREE, plan_replace(THREE, 1, 4, address(4), leader_id=2)[:3])[-1]
    assert joint_config.is_joint
    with pytest.raises(ConfigChangeError, match="the change completes forward"):
        rollback_steps(THREE, joint_config)


# --- properties ---------------------------------------------------------------------------


@st.composite
def simple_configurations(draw):
    voters = draw(VOTER_SETS)
    return simple(voters, draw(st.frozensets(NODE_IDS)) - voters)


TARGETS = st.frozensets(st.integers(1, 9), min_size=1, max_size=7)


def assert_every_step_is_safe(path):
    for before, after in itertools.pairwise(path):
        check_safe_transition(before, after)


@given(simple_configurations(), TARGETS, st.integers(1, 9))
def test_set_reaches_exactly_the_target_through_safe_steps(config, target, leader_id):
    path = run_plan(config, plan_set(config, {n: address(n) for n in target}, leader_id))
    assert path[-1].voters == target
    assert path[-1].learners == frozenset() and not path[-1].is_joint
    assert_every_step_is_safe(path)
    assert sum(c.is_joint for c in path) <= 1  # at most one joint configuration, left at once


@given(simple_configurations(), NODE_IDS, st.integers(8, 9), st.integers(1, 9))
def test_replace_swaps_one_voter_through_safe_steps(config, old_id, new_id, leader_id):
    assume(config.is_voter(old_id))
    path = run_plan(config, plan_replace(config, old_id, new_id, address(new_id), leader_id))
    assert path[-1].voters == config.voters - {old_id} | {new_id}
    assert_every_step_is_safe(path)


@given(simple_configurations(), TARGETS, st.integers(1, 9), st.data())
def test_a_new_leader_can_replan_a_set_from_where_it_stopped(config, target, leader_id, data):
    members = {n: address(n) for n in target}
    steps = plan_set(config, members, leader_id)
    stop = data.draw(st.integers(0, len(steps)))
    halfway = run_plan(config, steps[:stop])[-1]
    if halfway.is_joint:
        # Past the joint entry the change only goes forward: the leader leaves by itself.
        halfway = apply_step(halfway, LeaveJoint())
    final = run_plan(halfway, plan_set(halfway, members, leader_id))[-1]
    assert final.voters == target and final.learners == frozenset()


def test_the_seeds_witness_story_restores_a_majority_of_two_without_the_dead_node():
    """Seed 000 appendix: {1 2 3}, 1 dies; a witness 4 is added (t=3), 1 demoted to log-only
    (t=4): three voters, majority two, and 4 never leads; 1 returns and is promoted again,
    the witness becomes a full voter (t=5). Every step is a safe one-voter transition."""
    path = run_plan(THREE, plan_add(THREE, 4, address(4), wait_promoted=True, witness=True))
    assert path[-1].voters == {1, 2, 3, 4} and path[-1].witnesses == {4}
    path += run_plan(path[-1], plan_demote(path[-1], 1, leader_id=2))[1:]
    t4 = path[-1]
    assert t4.voters == {2, 3, 4} and t4.log_only == {1} and t4.electable == {2, 3}
    assert plan_add(t4, 1, address(1), wait_promoted=True) == (PromoteAgain(1), WaitPromoted(1))
    path += run_plan(t4, plan_promote(t4, 1))[1:]
    path += run_plan(path[-1], plan_promote(path[-1], 4))[1:]
    assert path[-1].voters == {1, 2, 3, 4} and not path[-1].witnesses and not path[-1].log_only
    for old, new in itertools.pairwise(path):
        check_safe_transition(old, new)


def test_demote_and_promote_refuse_what_can_never_succeed():
    witnessed = run_plan(THREE, plan_add(THREE, 4, address(4), wait_promoted=True, witness=True))
    config = witnessed[-1]
    assert plan_demote(config, 1, leader_id=1) == (
        TransferLeadership(1, frozenset({2, 3})),  # never to the witness
        Demote(1),
    )
    with pytest.raises(ConfigChangeError, match="no voter that can lead"):
        plan_demote(simple([1]), 1, leader_id=1)
    with pytest.raises(ConfigChangeError, match="not a voter"):
        plan_demote(config, 9, leader_id=1)
    with pytest.raises(ConfigChangeError, match="only a witness or a log-only member"):
        plan_promote(config, 2)
    assert plan_promote(config, 4) == (MakeElectable(4),)
