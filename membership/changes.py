"""Validation and application of one configuration change, in the style of etcd's confchange.

Every function takes the current configuration and returns the next one (its version one
higher) or raises ConfigChangeError with a message meant for the user; nothing is mutated.
Whether a change may start at all (`check_can_change`) and whether a transition keeps a
shared majority (`check_safe_transition`) are separate checks, so that the leader, the
driver and the simulation's invariant checker can each ask the question they need.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from quorumlog.membership.config import (
    Configuration,
    InvalidConfigurationError,
    JointVoters,
    NodeId,
    check_address,
    check_node_id,
)


class ConfigChangeError(Exception):
    """A proposed change is refused and will stay refused: the message says why."""


class ChangeInProgressError(ConfigChangeError):
    """Refused for now: an earlier change has not finished. Retry once it has."""


class UnsafeTransitionError(ConfigChangeError):
    """Two configurations could both be active without sharing a majority."""


def check_can_change(current: Configuration, committed: Configuration) -> None:
    """Refuse a new change while the last appended one is not committed.

    One at a time (seed 000, "until one such change commits or aborts, no others may be
    started"; Raft dissertation 4.1): otherwise two uncommitted changes of one voter each
    could add up to a transition without a shared majority.
    """
    assert committed.version <= current.version, "the committed configuration is newer"
    if committed.version < current.version:
        raise ChangeInProgressError(
            f"a configuration change is already in progress (version {current.version} is "
            f"not committed yet, {committed.version} is); retry once it commits"
        )


def add_learner(
    config: Configuration, node_id: NodeId, address: str, *, promote: bool, witness: bool = False
) -> Configuration:
    """Add a node that receives the log but does not vote (Kudu's PRE_FOLLOWER).

    With `promote` the leader promotes it once it is caught up (`membership.catchup`);
    without, it is staged for a joint change that will make it a voter. A `witness` is
    promoted to a voter that never leads.
    """
    _refuse_while_joint(config, f"adding node {node_id}")
    assert promote or not witness, "a witness is promoted by the leader"
    if config.is_voter(node_id):
        raise ConfigChangeError(f"node {node_id} is already a voter")
    if config.is_learner(node_id):
        raise ConfigChangeError(
            f"node {node_id} is already a learner at {config.addresses[node_id]}"
        )
    _check_new_member(config, node_id, address)
    return _next(
        config,
        learners=config.learners | {node_id},
        learners_to_promote=config.learners_to_promote | ({node_id} if promote else set()),
        witnesses=config.witnesses | ({node_id} if witness else set()),
        addresses={**config.addresses, node_id: address},
    )


def demote(config: Configuration, node_id: NodeId) -> Configuration:
    """A voter becomes log-only (Kudu's "L"): it keeps receiving the log but no longer votes
    or counts, so the majority shrinks by one (seed 000 appendix, t=4). One voter less: the
    one-by-one step. The actors move leadership away from it first."""
    _refuse_while_joint(config, f"demoting node {node_id}")
    if not config.is_voter(node_id):
        raise ConfigChangeError(f"node {node_id} is not a voter (voters: {_listed(config.voters)})")
    if not config.electable - {node_id}:
        raise ConfigChangeError(f"demoting node {node_id} would leave no voter that can lead")
    return _next(
        config,
        voters=config.voters - {node_id},
        learners=config.learners | {node_id},
        witnesses=config.witnesses - {node_id},
        log_only=config.log_only | {node_id},
    )


def promote_again(config: Configuration, node_id: NodeId) -> Configuration:
    """A log-only member is marked for promotion: the leader makes it a voter once it has
    caught up (it kept its log, so usually at once), with no new copy of the data."""
    _refuse_while_joint(config, f"promoting node {node_id}")
    if node_id not in config.log_only:
        raise ConfigChangeError(f"node {node_id} is not a log-only member")
    return _next(
        config,
        learners_to_promote=config.learners_to_promote | {node_id},
        log_only=config.log_only - {node_id},
    )


def make_electable(config: Configuration, node_id: NodeId) -> Configuration:
    """A witness becomes a full voter: it may campaign and take transfers from now on."""
    if node_id not in config.witnesses:
        raise ConfigChangeError(f"node {node_id} is not a witness")
    return _next(config, witnesses=config.witnesses - {node_id})


def promote(config: Configuration, node_id: NodeId) -> Configuration:
    """Make a learner a voter: one voter more, the one-by-one step (seed 000)."""
    _refuse_while_joint(config, f"promoting node {node_id}")
    if config.is_voter(node_id):
        raise ConfigChangeError(f"node {node_id} is already a voter")
    if not config.is_learner(node_id):
        raise ConfigChangeError(f"node {node_id} is not a member; add it as a learner first")
    return _next(
        config,
        voters=config.voters | {node_id},
        learners=config.learners - {node_id},
        learners_to_promote=config.learners_to_promote - {node_id},
        log_only=config.log_only - {node_id},
    )


def remove(config: Configuration, node_id: NodeId) -> Configuration:
    """Remove a voter (one voter less) or a learner (no majority changes).

    Removing the leader is allowed here; the actors transfer leadership first (seed 000).
    """
    _refuse_while_joint(config, f"removing node {node_id}")
    if node_id not in config.members:
        raise ConfigChangeError(
            f"node {node_id} is not a member (members: {_listed(config.members)})"
        )
    if not config.electable - {node_id}:
        raise ConfigChangeError(f"removing node {node_id} would leave no voter that can lead")
    return _next(
        config,
        voters=config.voters - {node_id},
        learners=config.learners - {node_id},
        learners_to_promote=config.learners_to_promote - {node_id},
        witnesses=config.witnesses - {node_id},
        log_only=config.log_only - {node_id},
        addresses={n: a for n, a in config.addresses.items() if n != node_id},
    )


def enter_joint(config: Configuration, new_voters: Mapping[NodeId, str]) -> Configuration:
    """C(old) -> C(old,new): from now on every decision needs a majority of both.

    New voters must already be members, learners that have caught up (seed 001, "learners
    catch up before they count"); a node that is in old only keeps voting until C(new).
    """
    _refuse_while_joint(config, "entering another joint configuration")
    _check_target(config, new_voters)
    if strangers := set(new_voters) - config.members:
        raise ConfigChangeError(
            f"nodes {_listed(strangers)} must be added as learners and catch up "
            "before they can become voters"
        )
    if set(new_voters) == config.voters:
        raise ConfigChangeError(f"the voters are already {_listed(config.voters)}")
    new = frozenset(new_voters)
    return _next(
        config,
        voters=config.voters | new,
        learners=config.learners - new,
        learners_to_promote=config.learners_to_promote - new,
        log_only=config.log_only - new,
        joint=JointVoters(old=config.voters, new=new),
    )


def leave_joint(config: Configuration) -> Configuration:
    """C(old,new) -> C(new): nodes that were in old only leave the configuration."""
    if config.joint is None:
        raise ConfigChangeError("the configuration is not joint: there is nothing to leave")
    kept = config.joint.new | config.learners
    return _next(
        config,
        voters=config.joint.new,
        witnesses=config.witnesses & kept,
        addresses={n: a for n, a in config.addresses.items() if n in kept},
        joint=None,
    )


def new_voters_for_set(config: Configuration, members: Mapping[NodeId, str]) -> dict[NodeId, str]:
    """Validate `members set`: the voters (with addresses) of C(new) for a joint change."""
    _refuse_while_joint(config, "setting the members")
    _check_target(config, members)
    return dict(members)


def new_voters_for_replace(
    config: Configuration, old_id: NodeId, new_id: NodeId, address: str
) -> dict[NodeId, str]:
    """Validate `members replace`: the voters of C(new), with `new_id` in place of `old_id`."""
    _refuse_while_joint(config, f"replacing node {old_id}")
    if old_id == new_id:
        raise ConfigChangeError(f"cannot replace node {old_id} with itself")
    if config.is_learner(old_id):
        raise ConfigChangeError(f"node {old_id} is a learner, not a voter; remove it instead")
    if not config.is_voter(old_id):
        raise ConfigChangeError(f"node {old_id} is not a member")
    if config.is_voter(new_id):
        raise ConfigChangeError(f"node {new_id} is already a voter")
    target = {n: a for n, a in config.addresses.items() if n in config.voters - {old_id}}
    target[new_id] = address
    _check_target(config, target)
    return target


def check_safe_transition(old: Configuration, new: Configuration) -> None:
    """Refuse a transition after which old and new might not share a majority.

    Nodes switch configuration at different times, so both can be active at once; every
    majority of one must then meet every majority of the other (Raft dissertation 4.1-4.3):
    - simple -> simple: the voters differ by at most one node;
    - simple -> joint: joint.old is the old voters (a joint majority contains one of old);
    - joint -> simple: the new voters are joint.new (a joint majority contains one of new).
    A rollback (truncated config batch) returns to a configuration that was already
    active, so it is not a transition in this sense.
    """
    if new.version <= old.version:
        raise UnsafeTransitionError(
            f"configuration versions must increase: {old.version} -> {new.version}"
        )
    if old.joint is None and new.joint is None:
        if len(changed := old.voters ^ new.voters) > 1:
            raise UnsafeTransitionError(
                f"voters change by more than one node ({_listed(changed)}); "
                "a change of several voters needs joint consensus"
            )
    elif old.joint is None and new.joint is not None:
        if new.joint.old != old.voters:
            raise UnsafeTransitionError(
                f"a joint configuration must start from the current voters "
                f"{_listed(old.voters)}, not {_listed(new.joint.old)}"
            )
    elif old.joint is not None and new.joint is None:
        if new.voters != old.joint.new:
            raise UnsafeTransitionError(
                f"leaving a joint configuration must go to its new voters "
                f"{_listed(old.joint.new)}, not {_listed(new.voters)}"
            )
    elif old.joint != new.joint:
        raise UnsafeTransitionError("a joint configuration cannot change its old or new voters")


def _refuse_while_joint(config: Configuration, what: str) -> None:
    # The leader leaves a joint configuration by itself once it commits (seed 001), so
    # anything else only has to wait, and the cluster never stays joint.
    if config.joint is not None:
        raise ChangeInProgressError(
            f"{what} must wait: a joint change to voters {_listed(config.joint.new)} is in progress"
        )


def _check_new_member(config: Configuration, node_id: NodeId, address: str) -> None:
    """A valid id and address, and no other member already at that address."""
    try:
        check_node_id(node_id)
        check_address(address)
    except InvalidConfigurationError as error:
        raise ConfigChangeError(f"node {node_id}: {error}") from None
    for member, member_address in config.addresses.items():
        if member_address == address and member != node_id:
            raise ConfigChangeError(f"address {address} is already used by node {member}")


def _check_target(config: Configuration, voters: Mapping[NodeId, str]) -> None:
    """A target voter set: non-empty, valid and distinct addresses, members where they are."""
    if not voters:
        raise ConfigChangeError("the new voter set is empty: it would leave no voter")
    for node_id, address in voters.items():
        _check_new_member(config, node_id, address)
        known = config.addresses.get(node_id)
        if known is not None and known != address:
            raise ConfigChangeError(
                f"node {node_id} is at {known}, not {address}; to move it, replace it"
            )
    if len(set(voters.values())) != len(voters):
        raise ConfigChangeError("two of the new voters have the same address")


def _next(config: Configuration, **changed: object) -> Configuration:
    try:
        return dataclasses.replace(config, version=config.version + 1, **changed)
    except InvalidConfigurationError as error:
        # What the specific checks above do not name, e.g. a node id out of range.
        raise ConfigChangeError(str(error)) from None


def _listed(node_ids: Iterable[NodeId]) -> str:
    return ", ".join(str(node_id) for node_id in sorted(node_ids)) or "none"
