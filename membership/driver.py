"""The driver procedures as plans: which steps take the cluster from here to there.

A plan is a tuple of steps computed from the current configuration; the actors execute it
one step at a time, each configuration step being one change through `membership.changes`
(so each is still validated against the configuration of the moment). Plans are computed
from what the configuration is, not from what a driver remembers doing, so after a leader
change a driver plans again from the configuration it finds (seed 003: never act on a stale
belief).

- add: a learner the leader promotes once caught up (seed 000, PRE_FOLLOWER).
- remove: one voter or learner less; the leader transfers leadership first (seed 000).
- move: add, then remove (seed 000, "Moving a tablet").
- replace and set: joint consensus (seed 001): new members join as staged learners, catch
  up, then C(old,new), then C(new). Before the joint entry a failed step rolls back
  (`rollback_steps`); after it the change only completes forward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from membership.changes import (
    ConfigChangeError,
    add_learner,
    new_voters_for_replace,
    new_voters_for_set,
    promote,
    remove,
)
from membership.config import Configuration, NodeId


@dataclass(frozen=True, slots=True)
class AddLearner:
    """Append a configuration with `node_id` as a learner; `promote` as in `add_learner`."""

    node_id: NodeId
    address: str
    promote: bool


@dataclass(frozen=True, slots=True)
class WaitCaughtUp:
    """Wait until the learner meets the catch-up rule (`membership.catchup`), or is a voter."""

    node_id: NodeId


@dataclass(frozen=True, slots=True)
class WaitPromoted:
    """Wait until the leader has promoted the learner by itself and the change committed."""

    node_id: NodeId


@dataclass(frozen=True, slots=True)
class TransferLeadership:
    """If `away_from` leads, move leadership to the most up-to-date of `candidates`."""

    away_from: NodeId
    candidates: frozenset[NodeId]


@dataclass(frozen=True, slots=True)
class EnterJoint:
    """Append C(old,new) with these (node id, address) pairs as the new voters."""

    new_voters: tuple[tuple[NodeId, str], ...]


@dataclass(frozen=True, slots=True)
class LeaveJoint:
    """Append C(new), unless the leader already did: it leaves a committed joint
    configuration by itself, so that the cluster never stays joint (seed 001)."""


@dataclass(frozen=True, slots=True)
class Remove:
    """Append a configuration without `node_id`."""

    node_id: NodeId


Step = (
    AddLearner | WaitCaughtUp | WaitPromoted | TransferLeadership | EnterJoint | LeaveJoint | Remove
)


def plan_add(
    config: Configuration, node_id: NodeId, address: str, *, wait_promoted: bool
) -> tuple[Step, ...]:
    """`members add [--wait]`: a learner, promoted by the leader once caught up."""
    add_learner(config, node_id, address, promote=True)  # refuses what can never succeed
    steps: tuple[Step, ...] = (AddLearner(node_id, address, promote=True),)
    return (*steps, WaitPromoted(node_id)) if wait_promoted else steps


def plan_remove(
    config: Configuration, node_id: NodeId, leader_id: NodeId | None
) -> tuple[Step, ...]:
    """`members remove`: removing the leader transfers leadership first (seed 000)."""
    remove(config, node_id)  # refuses an unknown node or the last voter
    if node_id != leader_id:
        return (Remove(node_id),)
    return (TransferLeadership(node_id, config.voters - {node_id}), Remove(node_id))


def plan_move(
    config: Configuration, from_id: NodeId, to_id: NodeId, address: str, leader_id: NodeId | None
) -> tuple[Step, ...]:
    """Add `to_id`, wait for its promotion, then remove `from_id` (seed 000): one by one,
    so with one voter more in between. For zones, prefer `plan_replace` (seed 001)."""
    if not config.is_voter(from_id):
        raise ConfigChangeError(f"node {from_id} is not a voter")
    promoted = promote(add_learner(config, to_id, address, promote=True), to_id)
    return (
        AddLearner(to_id, address, promote=True),
        WaitPromoted(to_id),
        *plan_remove(promoted, from_id, leader_id),
    )


def plan_replace(
    config: Configuration, old_id: NodeId, new_id: NodeId, address: str, leader_id: NodeId | None
) -> tuple[Step, ...]:
    """`members replace`: joint consensus from the voters to the voters with `new_id` in
    place of `old_id`, never passing through an even-sized or reduced voter set."""
    return _joint_steps(config, new_voters_for_replace(config, old_id, new_id, address), leader_id)


def plan_set(
    config: Configuration, members: Mapping[NodeId, str], leader_id: NodeId | None
) -> tuple[Step, ...]:
    """`members set`: joint consensus to exactly these voters; other learners are removed
    at the end, once the voters are right."""
    target = new_voters_for_set(config, members)
    strays = tuple(Remove(node_id) for node_id in sorted(config.learners - target.keys()))
    return (*_joint_steps(config, target, leader_id), *strays)


def rollback_steps(start: Configuration, current: Configuration) -> tuple[Step, ...]:
    """After a step of a joint plan failed before the joint entry: back to `start`.

    Only learners were added by then, so removing them restores the start. Once C(old,new)
    is appended there is no way back (issue 6: the change completes forward; the leader
    leaves the joint configuration by itself), and this refuses.
    """
    if current.joint is not None or current.voters != start.voters:
        raise ConfigChangeError(
            "the voters have changed since the start: the change completes forward"
        )
    return tuple(Remove(node_id) for node_id in sorted(current.learners - start.learners))


def _joint_steps(
    config: Configuration, target: Mapping[NodeId, str], leader_id: NodeId | None
) -> tuple[Step, ...]:
    if set(target) == config.voters:
        return ()
    steps: list[Step] = [
        AddLearner(node_id, target[node_id], promote=False)
        for node_id in sorted(target.keys() - config.members)
    ]
    # Learners count toward no majority until they have caught up (seed 001).
    steps += [WaitCaughtUp(node_id) for node_id in sorted(target.keys() - config.voters)]
    # A leader outside C(new) would step down once C(new) commits and leave the cluster
    # without a leader for an election timeout; moving leadership first avoids that gap.
    # When no current voter stays, no transfer target is caught up, and step-down it is.
    stays = config.voters & target.keys()
    if leader_id is not None and leader_id not in target and stays:
        steps.append(TransferLeadership(leader_id, frozenset(stays)))
    steps += [EnterJoint(tuple(sorted(target.items()))), LeaveJoint()]
    return tuple(steps)
