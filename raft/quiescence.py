"""Quiet groups: an idle group runs no timers at all (CockroachDB's quiescence).

A group whose every replica holds, has flushed and has committed the same log has nothing
to do until something happens (a replica whose node is down is left out: it gets what it
lacks when its link connects again). Its leader stops ticking and its followers stop their
election timers; the node's heartbeat manager keeps them alive with one batched message
per node pair per interval, in which such a group costs only its id, and watches the
peers: a leader node that goes silent, or stops naming a group, wakes that group's
followers; a follower node that goes silent wakes the groups it follows. Any input wakes a
group too. Waking brings in what the node heard meanwhile (`wake`), so that the lease and
the check-quorum rules see the contacts the node had, not the last ones the core saw.

Only timers stop: every rule that decides anything runs as before once the group wakes, so
quiescence can delay an election, never make an unsafe one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from quorumlog.raft.roles import Role


class QuiescenceRules:
    """RaftCore's quiet state (mixed into RaftCore, whose state it uses)."""

    quiet = False

    def can_quiesce(self) -> bool:
        """Whether nothing is left for timers to do: everything is replicated, flushed and
        committed everywhere this node can tell, and no change or transfer is under way."""
        log = self.log
        dirty = log.dirty_offset
        if self.persisted_offset != dirty or self.commit_offset != dirty:
            return False
        if self.role is Role.LEADER:
            # A majority heard from lately: a leader cut off stays awake, so that its
            # check-quorum rule steps it down.
            window = self.settings.election_timeout_min_s
            return (
                self.tracker.quorum_heard(self.config, self.id, self.now, window)
                and self.transfer is None
                and self.configs.can_lead(self.id)  # a witness leading hands over (raft/witness.py)
                and not self.configs.change_in_flight
                and not self.config.learners_to_promote
                # A follower whose node is down waits for it to come back: its link's
                # reconnection wakes the group (PeerConnected), and a leader kept awake
                # by it would retransmit to nobody, a node down costing a core.
                and self.tracker.settled(dirty, self.conditions.unreachable)
            )
        return (
            self.role in (Role.FOLLOWER, Role.LEARNER)
            and self.leader_id is not None
            # Its leader spoke for this group lately (not only for others on its node).
            and self.election.leader_recent(self.now)
            and self.following.settled(dirty)
        )

    def note_contacts(self, contacts: Mapping[int, float]) -> None:
        """A leader learns when the node last heard from each peer: quiet followers send
        no replies of their own, and must not look gone to the check-quorum rule."""
        self.tracker.note_contacts(contacts)

    def quiesce(self) -> None:
        """The node stops running this group's timers until something happens (it
        checked `can_quiesce`): its heartbeats stand for the group's meanwhile."""
        self.quiet = True

    def wake(self, now: float, contacts: Mapping[int, float]) -> None:
        """Leave the quiet state with what the node heard meanwhile: `contacts` are the
        last times each peer node answered, and the last time the leader's node named
        this group (actors/services/heartbeats.py)."""
        self.quiet = False
        self.now = now
        if self.role is Role.LEADER:
            self.note_contacts(contacts)
            self.leading.heartbeat_deadline_s = now
        elif self.leader_id is not None:
            election = self.election
            election.leader_heard_meanwhile(contacts.get(self.leader_id, -math.inf))
            # The timer runs again from the last contact, and not in the past: followers
            # woken together by a silent leader still campaign at random times.
            since = max(election.last_leader_contact_s, now - self.settings.election_timeout_min_s)
            self._reset_election_deadline(since)
