"""Configuration changes on the leader: learners promoted once caught up, joint consensus
left at once, stalled learners removed, departed nodes told (seeds 000, 001). What a
configuration does on every node (a role follows it at once) is the core's
(raft/core.py `config_changed`)."""

from __future__ import annotations

from typing import Protocol

import structlog

from quorumlog.membership.changes import (
    ConfigChangeError,
    check_safe_transition,
    leave_joint,
    promote,
    remove,
)
from quorumlog.membership.config import Configuration
from quorumlog.raft.configs import config_batch
from quorumlog.raft.host import CoreHost
from quorumlog.raft.progress import Progress

logger = structlog.get_logger("quorumlog.raft")

# Election timeouts a leader replicates to a node outside the configuration for it to learn
# that its removal committed (`sync_progress`): time for a live node to answer many times;
# one that was down asks for votes once it is back, and is taken on again.
DEPARTING_TIMEOUTS = 10


class LeaderTerm(Protocol):
    """What the changes read and write of their leader's term (raft/leader.py `Leader`)."""

    transfer: tuple[int, float] | None  # no change while leadership is handed over
    awaited_offset: int  # a configuration appended has a caller waiting for its commit


class MembershipChanges:
    """The leader's configuration changes (a part of raft/leader.py `Leader`): who it
    replicates to, the changes it proposes and those it makes on its own (promotions,
    leaving joint consensus, abandoning a stalled learner)."""

    def __init__(self, core: CoreHost, leader: LeaderTerm) -> None:
        self.core = core
        self.leader = leader

    def sync_progress(self) -> None:
        """Replicate to every member of the current and the last committed configuration,
        and to a node they no longer list until it knows that: until it holds a commit at
        or past the committed configuration, a node a change left out may campaign
        (raft/configs.py `needed_until_committed`), and it would for good, a pre-vote every
        election timeout, if no one told it (the leader that commits its removal is the
        last to replicate to it). Bounded by DEPARTING_TIMEOUTS; one that asks for votes
        later is taken on again (`track_if_departed`)."""
        core = self.core
        tracker = core.tracker
        members = core.configs.members_except(core.id)
        for peer in members:
            p = tracker.get(peer)
            if p is None or p.departing_until_s is not None:
                tracker.track(self._new_progress(peer))
        for peer in tracker.peers() - members:
            p = tracker.get(peer)
            if p.departing_until_s is None:
                p.departing_until_s = core.now + self._departing_s()
        self.release_departed()

    def _new_progress(self, peer: int) -> Progress:
        now = self.core.now
        floor = self._witness_floor(peer)
        return Progress(
            peer,
            floor or self.core.log.dirty_offset + 1,  # a witness's log starts at its floor
            last_contact_s=now,
            last_reply_s=now,
            advanced_s=now,
            floor=floor,
        )

    def _departing_s(self) -> float:
        return DEPARTING_TIMEOUTS * self.core.settings.election_timeout_max_s

    def release_departed(self) -> None:
        """Stop replicating to a node outside the configuration once it holds its removal
        committed, or once it had DEPARTING_TIMEOUTS election timeouts to learn it."""
        core = self.core
        core.tracker.release_departed(core.configs.committed_offset, core.now)

    def track_if_departed(self, peer: int) -> None:
        """Asked for a vote by a node no configuration it knows lists: one a change left
        out that never learned the change committed (down then, or its leader stepped down
        or crashed first), which would ask again every election timeout, waking quiet
        groups. Replicate to it as to one just removed, until it learns."""
        core = self.core
        if peer == core.id or peer in core.tracker:
            return
        if peer in core.configs.members_except(core.id):
            return
        p = self._new_progress(peer)
        p.departing_until_s = core.now + self._departing_s()
        core.tracker.track(p)

    def _witness_floor(self, peer: int) -> int:
        """Where the log of a new member starts: a witness joining as a learner needs only
        what is not yet committed (it votes and counts, it never serves the records), so
        restoring fault tolerance copies nothing old (seed 000 appendix). Committed records
        are on a majority already; the committed configuration goes with the first message."""
        core = self.core
        config, log = core.config, core.log
        if not (
            core.witnesses_from_commit and peer in config.witnesses and config.is_learner(peer)
        ):
            return 0
        floor = core.commit_offset + 1
        return (
            log.batch_start(floor) if log.log_start_offset <= floor <= log.dirty_offset else floor
        )

    def _check_may_lead(self, config: Configuration) -> None:
        """A node that may lead in `config`, and could not before, must hold the records."""
        core = self.core
        for node_id in _may_lead(config) - _may_lead(core.config):
            p = core.tracker.get(node_id)
            if p is not None and p.log_start is not None and not self.core.holds_the_log(p):
                raise ConfigChangeError(
                    f"node {node_id} holds the log from offset {max(p.floor, p.log_start)} "
                    "only (it joined as a witness, without the records before): it may lead "
                    "once it holds them; add a full replica instead"
                )

    def propose_config(self, config: Configuration) -> int:
        """Append a configuration; returns its offset. It takes effect now."""
        core = self.core
        check_safe_transition(core.config, config)
        self._check_may_lead(config)
        core.log.append([config_batch(config)], core.term)
        offset = self.leader.awaited_offset = core.log.dirty_offset
        core.configs.appended(offset, config)
        self.sync_progress()
        logger.info(
            "config_appended",
            node_id=core.id,
            group=core.group_id,
            offset=offset,
            config=config.to_json(),
        )
        return offset

    def config_committed(self) -> None:
        """A configuration committed (or one of an earlier term is left joint)."""
        core = self.core
        committed = core.configs.committed
        if not committed.is_voter(core.id):
            # A leader outside C(new) steps down once C(new) commits (seed 001).
            logger.info("leaving_as_leader", node_id=core.id, group=core.group_id, term=core.term)
            core.become_follower(core.term, None, core.now)
            return
        self.maybe_leave_joint()
        self.sync_progress()
        self.maybe_promote()

    def maybe_leave_joint(self) -> None:
        """Never stay in C(old,new): once it commits, move on to C(new) (seed 001). Not
        while leadership is being handed over (it is asked again at each tick): an entry
        appended then leaves the target's log behind this leader's, so the target cannot
        win this leader's vote, which C(old) needs (seed 10043: a slow disk handed over a
        group in C(old,new), and no one could lead it again). The target moves on to C(new)
        once it leads."""
        configs = self.core.configs
        committed = configs.committed
        if (
            committed is not None
            and committed.is_joint
            and not configs.change_in_flight
            and self.leader.transfer is None
        ):
            self.propose_config(leave_joint(committed))

    def maybe_promote(self) -> None:
        """Promote a learner marked for it once its lag could be replicated within one
        election timeout (Ongaro 4.2.1; Kudu's PRE_FOLLOWER); one change at a time."""
        core = self.core
        if (
            core.configs.change_in_flight
            or self.leader.transfer is not None  # appends wait for a transfer (`maybe_leave_joint`)
            # As an operator's change (actors/cluster/admin_calls.py): Raft's rule for
            # changes one at a time (dissertation, 4.1 errata). A new leader may not know yet
            # what its predecessor committed: a change it did not see may still be in
            # flight, and a promotion on top of it could leave two majorities that do not meet.
            or core.term_at(core.commit_offset) != core.term
        ):
            return
        config = core.config
        for learner in sorted(config.learners_to_promote):
            p = core.tracker.get(learner)
            if p is None or not self.core.caught_up(p):
                continue
            if learner in config.witnesses or self.core.holds_the_log(p):
                self.propose_config(promote(config, learner))
                return

    def abandon_stalled_learners(self) -> None:
        """Remove a learner that is not caught up and whose log has not advanced for
        `learner_abandon_s`: an `add` cut short, or a node that is gone, would otherwise
        stay in the configuration for ever. One change at a time."""
        core = self.core
        config = core.config
        if core.configs.change_in_flight or config.is_joint:
            return
        for learner in sorted(config.learners):
            p = core.tracker.get(learner)
            if p is None or core.now - p.advanced_s < core.settings.learner_abandon_s:
                continue
            if not self.core.caught_up(p):
                logger.warning(
                    "learner_abandoned",
                    node_id=core.id,
                    group=core.group_id,
                    learner=learner,
                    match_offset=p.match_offset,
                    stalled_s=round(core.now - p.advanced_s),
                )
                self.propose_config(remove(config, learner))
                return


def _may_lead(config: Configuration) -> frozenset[int]:
    """The electable voters and the learners that the leader will make such."""
    return config.electable | (config.learners_to_promote - config.witnesses)
