"""Validation and application of one configuration change, and the safe-transition rule."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.membership import changes
from quorumlog.membership.changes import (
    ChangeInProgressError,
    ConfigChangeError,
    UnsafeTransitionError,
    add_learner,
    check_can_change,
    check_safe_transition,
    enter_joint,
    leave_joint,
    new_voters_for_replace,
    new_voters_for_set,
    promote,
    remove,
)
from quorumlog.membership.quorum import has_quorum
from tests.membership.helpers import NODE_IDS, address, configurations, joint, simple

THREE = simple([1, 2, 3])

# --- each change -------------------------------------------------------------------------


def test_add_learner_adds_a_non_voter_and_bumps_the_version():
    config = add_learner(THREE, 4, address(4), promote=True)
    assert config.learners == {4} and config.voters == {1, 2, 3}
    assert config.learners_to_promote == {4}
    assert config.addresses[4] == address(4)
    assert config.version == THREE.version + 1
    assert THREE.learners == frozenset()  # nothing mutated


def test_a_staged_learner_is_not_to_be_promoted_by_the_leader():
    assert add_learner(THREE, 4, address(4), promote=False).learners_to_promote == frozenset()


def test_promote_makes_a_learner_a_voter():
    config = promote(add_learner(THREE, 4, address(4), promote=True), 4)
    assert config.voters == {1, 2, 3, 4}
    assert config.learners == frozenset() and config.learners_to_promote == frozenset()
    assert config.version == 2


def test_remove_a_voter_and_a_learner():
    with_learner = simple([1, 2, 3], learners=[4])
    assert remove(with_learner, 2).voters == {1, 3}
    assert 2 not in remove(with_learner, 2).addresses
    without_learner = remove(with_learner, 4)
    assert without_learner.learners == frozenset() and 4 not in without_learner.addresses


def test_enter_and_leave_joint():
    staged = add_learner(THREE, 4, address(4), promote=False)
    joint_config = enter_joint(staged, {2: address(2), 3: address(3), 4: address(4)})
    assert joint_config.joint.old == {1, 2, 3} and joint_config.joint.new == {2, 3, 4}
    assert joint_config.voters == {1, 2, 3, 4} and joint_config.learners == frozenset()
    assert 1 in joint_config.addresses  # still votes in old
    final = leave_joint(joint_config)
    assert final.voters == {2, 3, 4} and not final.is_joint
    assert 1 not in final.addresses
    assert final.version == THREE.version + 3


def test_leave_joint_keeps_learners():
    config = leave_joint(joint(old=[1, 2, 3], new=[1, 2, 4], learners=[5]))
    assert config.learners == {5} and config.members == {1, 2, 4, 5}


# --- refusals, each saying what was wrong --------------------------------------------------

JOINT = joint(old=[1, 2, 3], new=[2, 3, 4], learners=[5])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda: add_learner(THREE, 2, "x:1", promote=True), "node 2 is already a voter"),
        (
            lambda: add_learner(simple([1], [4]), 4, "x:1", promote=True),
            "node 4 is already a learner at 10.0.0.4:7001",
        ),
        (
            lambda: add_learner(THREE, 4, address(2), promote=True),
            "address 10.0.0.2:7001 is already used by node 2",
        ),
        (lambda: add_learner(THREE, 4, "nowhere", promote=True), "node 4: address 'nowhere'"),
        (lambda: add_learner(THREE, -4, "x:1", promote=True), "node id -4 is outside"),
        (lambda: add_learner(THREE, "4", "x:1", promote=True), "must be an integer"),
        (lambda: promote(THREE, 1), "node 1 is already a voter"),
        (lambda: promote(THREE, 9), "node 9 is not a member; add it as a learner first"),
        (lambda: remove(THREE, 9), r"node 9 is not a member \(members: 1, 2, 3\)"),
        (lambda: remove(simple([1], [2]), 1), "removing node 1 would leave no voter"),
        (lambda: enter_joint(THREE, {}), "would leave no voter"),
        (
            lambda: enter_joint(THREE, {1: address(1), 4: address(4)}),
            "nodes 4 must be added as learners and catch up",
        ),
        (
            lambda: enter_joint(THREE, {1: address(1), 2: address(2), 3: address(3)}),
            "the voters are already 1, 2, 3",
        ),
        (lambda: enter_joint(THREE, {1: "elsewhere:1"}), "node 1 is at 10.0.0.1:7001, not"),
        (
            lambda: enter_joint(simple([1, 2], [3]), {1: address(1), 3: address(2)}),
            "already used by node 2",
        ),
        (lambda: leave_joint(THREE), "not joint: there is nothing to leave"),
        (lambda: new_voters_for_set(THREE, {}), "would leave no voter"),
        (
            lambda: new_voters_for_set(THREE, {4: "x:1", 5: "x:1"}),
            "two of the new voters have the same address",
        ),
        (lambda: new_voters_for_replace(THREE, 1, 1, "x:1"), "with itself"),
        (
            lambda: new_voters_for_replace(simple([1, 2], [3]), 3, 4, "x:1"),
            "node 3 is a learner, not a voter; remove it instead",
        ),
        (lambda: new_voters_for_replace(THREE, 9, 4, "x:1"), "node 9 is not a member"),
        (lambda: new_voters_for_replace(THREE, 1, 2, "x:1"), "node 2 is already a voter"),
        (lambda: new_voters_for_replace(THREE, 1, 4, "bad"), "is not HOST:PORT"),
    ],
)
def test_refused_changes_say_why(change, message):
    with pytest.raises(ConfigChangeError, match=message) as raised:
        change()
    # These can never succeed: the CLI exits at once instead of retrying (docs/cli.md).
    assert not isinstance(raised.value, ChangeInProgressError)


@pytest.mark.parametrize(
    "change",
    [
        lambda: add_learner(JOINT, 6, address(6), promote=True),
        lambda: promote(JOINT, 5),
        lambda: remove(JOINT, 5),
        lambda: enter_joint(JOINT, {5: address(5)}),
        lambda: new_voters_for_set(JOINT, {1: address(1)}),
        lambda: new_voters_for_replace(JOINT, 2, 6, address(6)),
    ],
)
def test_every_change_but_leaving_waits_while_joint(change):
    with pytest.raises(
        ChangeInProgressError, match="joint change to voters 2, 3, 4 is in progress"
    ):
        change()


def test_new_voters_for_replace_and_set():
    assert new_voters_for_replace(THREE, 1, 4, address(4)) == {
        2: address(2),
        3: address(3),
        4: address(4),
    }
    members = {4: address(4), 5: address(5)}
    assert new_voters_for_set(THREE, members) == members


# --- one change at a time ------------------------------------------------------------------


def test_a_change_may_start_once_the_last_one_committed():
    check_can_change(current=THREE, committed=THREE)
    appended = add_learner(THREE, 4, address(4), promote=True)
    with pytest.raises(
        ChangeInProgressError, match="a configuration change is already in progress"
    ):
        check_can_change(current=appended, committed=THREE)
    check_can_change(current=appended, committed=appended)


# --- the safe-transition rule --------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (simple([1, 2, 3]), simple([1, 2, 3, 4], version=1)),
        (simple([1, 2, 3]), simple([1, 2], version=1)),
        (simple([1, 2, 3]), simple([1, 2, 3], [4], version=1)),  # learners change no majority
        (simple([1, 2, 3]), joint([1, 2, 3], [4, 5, 6], version=1)),
        (joint([1, 2, 3], [4, 5, 6]), simple([4, 5, 6], version=1)),
        (joint([1, 2, 3], [4, 5, 6]), joint([1, 2, 3], [4, 5, 6], [7], version=1)),
    ],
)
def test_safe_transitions(old, new):
    check_safe_transition(old, new)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (simple([1, 2, 3]), simple([1, 2, 3, 4]), "versions must increase: 0 -> 0"),
        (simple([1, 2, 3]), simple([1, 2, 4], version=1), r"more than one node \(3, 4\)"),
        (simple([1]), simple([1, 2, 3], version=1), "needs joint consensus"),
        (simple([1, 2, 3]), joint([1, 2], [4], version=1), "must start from the current voters"),
        (joint([1, 2, 3], [4, 5, 6]), simple([1, 2, 3], version=1), "must go to its new voters"),
        (joint([1, 2], [3]), joint([1, 2], [4], version=1), "cannot change its old or new"),
    ],
)
def test_unsafe_transitions(old, new, message):
    with pytest.raises(UnsafeTransitionError, match=message):
        check_safe_transition(old, new)


def disjoint_quorums(a, b, universe):
    """A quorum of `a` and a quorum of `b` that share no node, or None if there are none.

    Quorums are upward closed, so it is enough to try each set against its complement.
    """
    for size in range(len(universe) + 1):
        for nodes in itertools.combinations(universe, size):
            rest = set(universe) - set(nodes)
            if has_quorum(a, set(nodes)) and has_quorum(b, rest):
                return set(nodes), rest
    return None


def test_no_allowed_transition_has_two_disjoint_majorities_brute_force():
    # Every simple and joint configuration over four nodes, every pair of them: whenever
    # the rule allows old -> new, every quorum of old meets every quorum of new.
    universe = (1, 2, 3, 4)
    subsets = [frozenset(c) for size in range(5) for c in itertools.combinations(universe, size)]
    voter_sets = [nodes for nodes in subsets if nodes]
    olds = [simple(v) for v in voter_sets] + [joint(o, n) for o in voter_sets for n in voter_sets]
    news = [dataclasses.replace(config, version=1) for config in olds]
    quorums_of = {
        config: {nodes for nodes in subsets if has_quorum(config, nodes)} for config in olds + news
    }

    def split(a, b):  # quorums are upward closed: try each quorum of a against its complement
        return any(frozenset(universe) - nodes in quorums_of[b] for nodes in quorums_of[a])

    allowed = refused_splits = 0
    for old, new in itertools.product(olds, news):
        try:
            check_safe_transition(old, new)
        except UnsafeTransitionError:
            refused_splits += split(old, new)
            continue
        allowed += 1
        assert not split(old, new), (old.voter_sets, new.voter_sets)
    # The rule is not vacuous, and what it refuses includes real splits.
    assert allowed > len(olds)
    assert refused_splits > len(olds)


# --- properties of the changes -------------------------------------------------------------

CHANGES = st.one_of(
    st.tuples(st.just("add_learner"), NODE_IDS, st.booleans()),
    st.tuples(st.just("promote"), NODE_IDS),
    st.tuples(st.just("remove"), NODE_IDS),
    st.tuples(st.just("enter_joint"), st.frozensets(NODE_IDS)),
    st.tuples(st.just("leave_joint")),
)


def apply_change(config, change):
    match change:
        case ("add_learner", node_id, to_promote):
            return add_learner(config, node_id, address(node_id), promote=to_promote)
        case ("enter_joint", voters):
            return enter_joint(config, {n: address(n) for n in voters})
        case (name, *args):
            return getattr(changes, name)(config, *args)


@given(configurations(), st.lists(CHANGES, max_size=8))
def test_every_accepted_change_is_a_safe_transition(config, proposed):
    for change in proposed:
        before = config.to_wire()
        try:
            after = apply_change(config, change)
        except ConfigChangeError:
            continue
        assert config.to_wire() == before  # mutates nothing
        check_safe_transition(config, after)
        assert disjoint_quorums(config, after, range(1, 8)) is None
        assert after.version == config.version + 1
        config = after
