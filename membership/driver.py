"""The driver procedures as plans: which steps take the cluster from here to there.

A plan is a tuple of steps computed from the current configuration; the actors execute it
one step at a time, each configuration step being one change through `membership.changes`
(so each is still validated against the configuration of the moment). Plans are computed
from what the configuration is, not from what a driver remembers doing, so after a leader
change a driver plans again from the configuration it finds (seed 003: never act on a stale
belief).

- add: a learner the leader promotes once caught up (seed 000, PRE_FOLLOWER); as a witness,
  to a voter that never leads; a log-only member added again is promoted again.
- remove: one voter or learner less; the leader transfers leadership first (seed 000).
- demote: a voter becomes log-only, one voter less, leadership moved away first; promote:
  a log-only member or a witness becomes a full voter (seed 000 appendix, t=3..t=5).
- move: add, then remove (seed 000, "Moving a tablet").
- replace and set: joint consensus (seed 001): new members join as staged learners, catch
  up, then C(old,new), then C(new). Before the joint entry a failed step rolls back
  (`rollback_steps`); after it the change only completes forward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quorumlog.membership.changes import (
    ConfigChangeError,
    add_learner,
    demote,
    make_electable,
    new_voters_for_replace,
    new_voters_for_set,
    promote,
    promote_again,
    remove,
)
from quorumlog.membership.config import Configuration, NodeId


@dataclass(frozen=True, slots=True)
class AddLearner:
    """Append a configuration with `node_id` as a learner; `promote` and `witness` as in
    `add_learner`."""

    node_id: NodeId
    address: str
    promote: bool
    witness: bool = False


@dataclass(frozen=True, slots=True)
class Demote:
    """Append a configuration with voter `node_id` log-only (`membership.changes.demote`)."""

    node_id: NodeId


@dataclass(frozen=True, slots=True)
class PromoteAgain:
    """Mark log-only `node_id` for promotion (`membership.changes.promote_again`)."""

    node_id: NodeId


@dataclass(frozen=True, slots=True)
class MakeElectable:
    """Append a configuration where witness `node_id` is a full voter."""

    node_id: NodeId


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
    AddLearner
    | WaitCaughtUp
    | WaitPromoted
    | TransferLeadership
    | EnterJoint
    | LeaveJoint
    | Remove
    | Demote
    | PromoteAgain
    | MakeElectable
)


def plan_add(
    config: Configuration,
    node_id: NodeId,
    address: str,
    *,
    wait_promoted: bool,
    witness: bool = False,
) -> tuple[Step, ...]:
    """`members add [--wait] [--witness]`: a learner, promoted by the leader once caught
    up. A log-only member added again at its address is promoted again: it kept its log,
    so no new copy is needed (seed 000 appendix)."""
    steps: tuple[Step, ...]
    if node_id in config.log_only and config.addresses[node_id] == address and not witness:
        steps = (PromoteAgain(node_id),)
    else:
        add_learner(config, node_id, address, promote=True, witness=witness)  # or refuses
        steps = (AddLearner(node_id, address, promote=True, witness=witness),)
    return (*steps, WaitPromoted(node_id)) if wait_promoted else steps


def plan_remove(
    config: Configuration, node_id: NodeId, leader_id: NodeId | None
) -> tuple[Step, ...]:
    """`members remove`: removing the leader transfers leadership first (seed 000)."""
    remove(config, node_id)  # refuses an unknown node or the last voter
    return (*_away_from_leader(config, node_id, leader_id), Remove(node_id))


def plan_demote(
    config: Configuration, node_id: NodeId, leader_id: NodeId | None
) -> tuple[Step, ...]:
    """`members demote`: the leader hands leadership over first, as for a removal."""
    demote(config, node_id)  # refuses a non-voter or the last voter that can lead
    return (*_away_from_leader(config, node_id, leader_id), Demote(node_id))


def plan_promote(config: Configuration, node_id: NodeId) -> tuple[Step, ...]:
    """`members promote`: a witness becomes a full voter at once; a log-only member is
    promoted by the leader once caught up, and the call waits for it."""
    if node_id in config.witnesses and config.is_voter(node_id):
        make_electable(config, node_id)
        return (MakeElectable(node_id),)
    if node_id in config.log_only:
        promote_again(config, node_id)
        return (PromoteAgain(node_id), WaitPromoted(node_id))
    role = "a voter" if config.is_voter(node_id) else "not a member"
    if config.is_learner(node_id):
        role = "a learner the leader promotes by itself"
    raise ConfigChangeError(
        f"node {node_id} is {role}: only a witness or a log-only member is promoted"
    )


def _away_from_leader(
    config: Configuration, node_id: NodeId, leader_id: NodeId | None
) -> tuple[Step, ...]:
    """A leader about to lose its vote moves leadership to a voter that can lead."""
    if node_id != leader_id:
        return ()
    return (TransferLeadership(node_id, config.electable - {node_id}),)


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
    stays = config.electable & target.keys()
    if leader_id is not None and leader_id not in target and stays:
        steps.append(TransferLeadership(leader_id, frozenset(stays)))
    steps += [EnterJoint(tuple(sorted(target.items()))), LeaveJoint()]
    return tuple(steps)
