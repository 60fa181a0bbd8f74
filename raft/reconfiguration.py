"""Configuration changes on the leader and their effect on every node: learners promoted
once caught up, joint consensus left at once, leadership transfer (seeds 000, 001)."""

from __future__ import annotations

import structlog

from quorumlog.membership.catchup import is_caught_up
from quorumlog.membership.changes import (
    ConfigChangeError,
    check_safe_transition,
    leave_joint,
    promote,
    remove,
)
from quorumlog.membership.config import Configuration
from quorumlog.raft.configs import config_batch
from quorumlog.raft.messages import TimeoutNow
from quorumlog.raft.progress import Progress
from quorumlog.raft.roles import NotLeaderError, Role

logger = structlog.get_logger("quorumlog.raft")

# Election timeouts a leader replicates to a node outside the configuration for it to learn
# that its removal committed (`_sync_progress`): time for a live node to answer many times;
# one that was down asks for votes once it is back, and is taken on again.
DEPARTING_TIMEOUTS = 10


class ReconfigurationRules:
    """RaftCore's membership rules (mixed into RaftCore, whose state they use)."""

    # ----------------------------------------------------------------------- membership

    def _config_changed(self) -> None:
        """A configuration was appended or truncated: this node's role and the leader's
        followers follow it at once (seed 000: a configuration applies on append)."""
        if self.role is Role.LEADER:
            self._sync_progress()
            return
        voter = self.configs.takes_part(self.id)
        if self.role is Role.LEARNER and voter:
            self.role = Role.FOLLOWER
            self._reset_election_deadline(self.now)
        elif not voter and self.role is not Role.LEARNER:
            self.role = Role.LEARNER  # removed or demoted: never campaigns again
            self.tracker.clear_votes()

    def peer_ids(self) -> set[int]:
        """The nodes whose reachability the core asks of its node (raft/conditions.py):
        the members, and the departing ones a leader still replicates to."""
        return (
            self.configs.members_except(self.id) | self.tracker.peers()
            if self.config is not None
            else set()
        )

    def _new_progress(self, peer: int) -> Progress:
        floor = self._witness_floor(peer)
        return Progress(
            peer,
            floor or self.log.dirty_offset + 1,  # a witness's log starts at its floor
            last_contact_s=self.now,
            last_reply_s=self.now,
            advanced_s=self.now,
            floor=floor,
        )

    def _sync_progress(self) -> None:
        """Replicate to every member of the current and the last committed configuration,
        and to a node they no longer list until it knows that: until it holds a commit at
        or past the committed configuration, a node a change left out may campaign
        (raft/configs.py `needed_until_committed`), and it would for good, a pre-vote every election
        timeout, if no one told it (the leader that commits its removal is the last to
        replicate to it). Bounded by DEPARTING_TIMEOUTS; one that asks for votes later
        is taken on again (`track_if_departed`)."""
        members = self.configs.members_except(self.id)
        for peer in members:
            p = self.tracker.get(peer)
            if p is None or p.departing_until_s is not None:
                self.tracker.track(self._new_progress(peer))
        for peer in self.tracker.peers() - members:
            p = self.tracker.get(peer)
            if p.departing_until_s is None:
                p.departing_until_s = self.now + self._departing_s()
        self._release_departed()

    def _departing_s(self) -> float:
        return DEPARTING_TIMEOUTS * self.settings.election_timeout_max_s

    def _release_departed(self) -> None:
        """Stop replicating to a node outside the configuration once it holds its removal
        committed, or once it had DEPARTING_TIMEOUTS election timeouts to learn it."""
        self.tracker.release_departed(self.configs.committed_offset, self.now)

    def track_if_departed(self, peer: int) -> None:
        """A leader asked for a vote by a node no configuration it knows lists: one a change
        left out that never learned the change committed (down then, or its leader stepped
        down or crashed first), which would ask again every election timeout, waking quiet
        groups. Replicate to it as to one just removed, until it learns."""
        if self.role is not Role.LEADER or peer == self.id or peer in self.tracker:
            return
        if peer in self.configs.members_except(self.id):
            return
        p = self._new_progress(peer)
        p.departing_until_s = self.now + self._departing_s()
        self.tracker.track(p)

    def _witness_floor(self, peer: int) -> int:
        """Where the log of a new member starts: a witness joining as a learner needs only
        what is not yet committed (it votes and counts, it never serves the records), so
        restoring fault tolerance copies nothing old (seed 000 appendix). Committed records
        are on a majority already; the committed configuration goes with the first message."""
        config, log = self.config, self.log
        if not (
            self.witnesses_from_commit and peer in config.witnesses and config.is_learner(peer)
        ):
            return 0
        floor = self.commit_offset + 1
        return (
            log.batch_start(floor) if log.log_start_offset <= floor <= log.dirty_offset else floor
        )

    def holds_the_log(self, p: Progress) -> bool:
        """Whether a member holds every record this leader holds (a witness that joined
        with the tail only does not, until retention passes its start), those before an
        operator's trim aside: a member that joined from a leader that had dropped them
        starts after them, and nobody reads them (simulation seed 10000 of the topic
        changes: such a member was never promoted, its move never finished). Records, not
        positions: a member whose log starts later by Raft's own batches only lacks none
        (time retention drops a front segment of them at once, as they carry no
        timestamp: seed 82584's learner was refused promotion for good)."""
        start = max(self.log.log_start_offset, min(self.log_floor, self.commit_offset + 1))
        if p.floor > start or p.log_start is None:
            return False
        return p.log_start <= start or (
            p.log_start <= self.log.dirty_offset + 1
            and self.log.records_before(p.log_start) <= self.log.records_before(start)
        )

    def _check_may_lead(self, config: Configuration) -> None:
        """A node that may lead in `config`, and could not before, must hold the records."""
        for node_id in _may_lead(config) - _may_lead(self.config):
            p = self.tracker.get(node_id)
            if p is not None and p.log_start is not None and not self.holds_the_log(p):
                raise ConfigChangeError(
                    f"node {node_id} holds the log from offset {max(p.floor, p.log_start)} "
                    "only (it joined as a witness, without the records before): it may lead "
                    "once it holds them; add a full replica instead"
                )

    def propose_config(self, config: Configuration) -> int:
        """Append a configuration on the leader; returns its offset. It takes effect now."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id)
        check_safe_transition(self.config, config)
        self._check_may_lead(config)
        self.log.append([config_batch(config)], self.term)
        offset = self.leading.awaited_offset = self.log.dirty_offset
        self.configs.appended(offset, config)
        self._sync_progress()
        logger.info(
            "config_appended",
            node_id=self.id,
            group=self.group_id,
            offset=offset,
            config=config.to_json(),
        )
        return offset

    def _leader_config_committed(self) -> None:
        committed = self.configs.committed
        if not committed.is_voter(self.id):
            # A leader outside C(new) steps down once C(new) commits (seed 001).
            logger.info("leaving_as_leader", node_id=self.id, group=self.group_id, term=self.term)
            self.become_follower(self.term, None, self.now)
            return
        self._maybe_leave_joint()
        self._sync_progress()
        self._maybe_promote()

    def _maybe_leave_joint(self) -> None:
        """Never stay in C(old,new): once it commits, move on to C(new) (seed 001). Not
        while leadership is being handed over (it is asked again at each tick): an entry
        appended then leaves the target's log behind this leader's, so the target cannot
        win this leader's vote, which C(old) needs (seed 10043: a slow disk handed over a
        group in C(old,new), and no one could lead it again). The target moves on to C(new)
        once it leads."""
        committed = self.configs.committed
        if (
            self.role is Role.LEADER
            and committed is not None
            and committed.is_joint
            and not self.configs.change_in_flight
            and self.transfer is None
        ):
            self.propose_config(leave_joint(committed))

    def _maybe_promote(self) -> None:
        """Promote a learner marked for it once its lag could be replicated within one
        election timeout (Ongaro 4.2.1; Kudu's PRE_FOLLOWER); one change at a time."""
        if (
            self.role is not Role.LEADER
            or self.configs.change_in_flight
            or self.transfer is not None  # appends wait for a transfer (`_maybe_leave_joint`)
            # As an operator's change (actors/cluster/admin_calls.py): Raft's rule for changes one at a
            # time (dissertation, 4.1 errata). A new leader may not know yet what its
            # predecessor committed: a change it did not see may still be in flight, and a
            # promotion on top of it could leave two majorities that do not meet.
            or self.term_at(self.commit_offset) != self.term
        ):
            return
        config = self.config
        for learner in sorted(config.learners_to_promote):
            p = self.tracker.get(learner)
            if p is None or not self.caught_up(p):
                continue
            if learner in config.witnesses or self.holds_the_log(p):
                self.propose_config(promote(config, learner))
                return

    def _abandon_stalled_learners(self) -> None:
        """Remove a learner that is not caught up and whose log has not advanced for
        `learner_abandon_s`: an `add` cut short, or a node that is gone, would otherwise
        stay in the configuration for ever. One change at a time."""
        config = self.config
        if self.role is not Role.LEADER or self.configs.change_in_flight or config.is_joint:
            return
        for learner in sorted(config.learners):
            p = self.tracker.get(learner)
            if p is None or self.now - p.advanced_s < self.settings.learner_abandon_s:
                continue
            if not self.caught_up(p):
                logger.warning(
                    "learner_abandoned",
                    node_id=self.id,
                    group=self.group_id,
                    learner=learner,
                    match_offset=p.match_offset,
                    stalled_s=round(self.now - p.advanced_s),
                )
                self.propose_config(remove(config, learner))
                return

    def caught_up(self, p: Progress) -> bool:
        return is_caught_up(
            self.log.dirty_offset,
            p.match_offset,
            p.flushed_offset,
            p.rate.offsets_per_s,
            self.settings.election_timeout_min_s,
        )

    def live_voters(self) -> list[int]:
        """The other voters that may lead (no witness) this leader heard from within the
        minimum election timeout: where leadership may be handed."""
        timeout = self.settings.election_timeout_min_s
        return self.tracker.heard_within(self.now, timeout, self.configs.can_lead)

    def transfer_to_live_voter(self, target: int) -> bool:
        """Leader balancing, a slow disk: move leadership to `target` if it is a live
        voter (`live_voters`); True if a transfer started."""
        if not self.is_leader or self.transfer is not None or target not in self.live_voters():
            return False
        self.transfer_leadership(target)
        return True

    def transfer_leadership(self, target: int) -> None:
        """Move leadership to `target`: appends wait, the target is brought up to date and
        told to campaign at once (TimeoutNow); given up after an election timeout."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id)
        if target == self.id:
            return
        if not self.configs.is_voter(target):
            raise ConfigChangeError(f"node {target} is not a voter: it cannot lead")
        if not self.configs.can_lead(target):
            raise ConfigChangeError(f"node {target} is a witness: it never leads")
        self.leading.transfer = (target, self.now + self.settings.election_timeout_max_s)
        logger.info(
            "transfer_started", node_id=self.id, group=self.group_id, target=target, term=self.term
        )
        self._maybe_timeout_now()

    def _maybe_timeout_now(self) -> None:
        if self.transfer is None:
            return
        target, _ = self.transfer
        p = self.tracker.get(target)
        if p is not None and p.match_offset >= self.log.dirty_offset:
            self._send(target, TimeoutNow(group=self.group_id, term=self.term, leader_id=self.id))


def _may_lead(config: Configuration) -> frozenset[int]:
    """The electable voters and the learners that the leader will make such."""
    return config.electable | (config.learners_to_promote - config.witnesses)
