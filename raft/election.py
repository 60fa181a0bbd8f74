"""Elections: pre-vote, campaigns, votes, a new leader's first steps, and a leader
that lost touch with its majority stepping down (Raft 5.2, dissertation 9.6; seeds 000-002)."""

from __future__ import annotations

import structlog

from quorumlog.log.batch import BatchType, build_batch
from quorumlog.membership.quorum import VoteResult, has_quorum, vote_result
from quorumlog.raft.roles import Role
from quorumlog.transport.messages import VoteReply, VoteRequest

logger = structlog.get_logger("quorumlog.raft")


def barrier_batch() -> bytes:
    """The empty batch a new leader appends so that older entries commit through it."""
    return build_batch(b"", record_count=1, batch_type=BatchType.BARRIER)


class ElectionRules:
    """RaftCore's election rules (mixed into RaftCore, whose state they use)."""

    def campaign_soon(self, now: float) -> None:
        """Start an election at the next tick: a new group's preferred leader goes first
        (its placement spreads leaders evenly)."""
        self.election_deadline_s = now

    def _start_pre_vote(self, now: float) -> None:
        self.role = Role.PRE_CANDIDATE
        self.leader_id = None
        self.votes = {self.id: True}
        self._reset_election_deadline(now)
        self._request_votes(self.term + 1, pre_vote=True, transfer=False)
        self._count_votes(now)

    def _campaign(self, now: float, transfer: bool = False) -> None:
        self.elections_started += 1
        self._set_term(self.term + 1, self.id)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.votes = {self.id: True}
        self._reset_election_deadline(now)
        logger.info(
            "election_started",
            node_id=self.id,
            group=self.group_id,
            term=self.term,
            transfer=transfer,
        )
        self._request_votes(self.term, pre_vote=False, transfer=transfer)
        self._count_votes(now)

    def _request_votes(self, term: int, pre_vote: bool, transfer: bool) -> None:
        request = VoteRequest(
            self.group_id,
            term,
            self.id,
            self.log.dirty_offset,
            self.log.last_term,
            pre_vote,
            transfer,
        )
        for voter in self.config.voters - {self.id}:
            self._send(voter, request)

    def _count_votes(self, now: float) -> None:
        result = vote_result(self.config, self.votes)
        if result is VoteResult.WON:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(now)
            else:
                self._become_leader(now)
        elif result is VoteResult.LOST:
            self.become_follower(self.term, None, now)

    def _become_leader(self, now: float) -> None:
        self.role = Role.LEADER
        self.leader_id = self.id
        self.leader_since_s = now
        self.votes.clear()
        self.progress = {}
        self._sync_progress()
        self.log.append([barrier_batch()], self.term)
        self.awaited_offset = self.log.dirty_offset
        self.flush_urgent = True
        logger.info(
            "became_leader",
            node_id=self.id,
            group=self.group_id,
            term=self.term,
            dirty_offset=self.log.dirty_offset,
            commit_offset=self.commit_offset,
        )
        self._broadcast_heartbeat(now)
        self.pump()
        self._maybe_commit()

    # ----------------------------------------------------------------------- votes

    def _on_vote_request(self, sender: int, req: VoteRequest, now: float) -> None:
        up_to_date = (req.last_term, req.last_offset) >= (self.log.last_term, self.log.dirty_offset)
        # Storage rule 6: a repaired node votes again only once it has caught up. Whether
        # it is a voter does not matter here: the candidate counts only its voters' votes,
        # and a learner promoted by a joint entry it has not received yet must be able to
        # vote, or C(old,new) can elect no one (etcd's rule; a simulation seed stalled).
        may_vote = self.log.dirty_offset >= self.meta.vote_after_offset
        if req.pre_vote:
            granted = (
                may_vote
                and up_to_date
                and req.term > self.term
                and (req.transfer or not self._in_lease(now))
            )
            reply_term = req.term if granted else self.term
            self._send(sender, VoteReply(self.group_id, self.id, reply_term, granted, True))
            return
        granted = may_vote and up_to_date and self.meta.voted_for in (None, req.candidate_id)
        if granted and self.meta.voted_for is None:
            self._set_term(self.term, req.candidate_id)
        if granted:
            self._reset_election_deadline(now)
        self._send(sender, VoteReply(self.group_id, self.id, self.term, granted, False))

    def _on_vote_reply(self, sender: int, reply: VoteReply, now: float) -> None:
        if reply.pre_vote != (self.role is Role.PRE_CANDIDATE):
            return
        if self.role not in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            return
        self.votes[sender] = reply.granted
        self._count_votes(now)

    def _check_quorum(self, now: float) -> None:
        """Step down if a majority has not answered within an election timeout."""
        window = self.settings.election_timeout_max_s
        if now - self.leader_since_s < window:
            return
        recent = {self.id} | {
            p.node_id for p in self.progress.values() if now - p.last_contact_s < window
        }
        if not has_quorum(self.config, recent):
            logger.warning(
                "lost_quorum_contact", node_id=self.id, group=self.group_id, term=self.term
            )
            self.become_follower(self.term, None, now)
