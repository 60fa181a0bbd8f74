"""Elections: pre-vote, campaigns, votes, a new leader's first steps, and a leader
that lost touch with its majority stepping down (Raft 5.2, dissertation 9.6; seeds 000-002).

With hundreds of groups per node, elections are paced so that they converge however many
start at once (docs/decisions/raft.md, "Elections with many partitions"):
- each group orders its voters the same way on every node (`election_order`, a shuffle by
  group id); when its timer runs out, a voter waits one more turn for each voter before it
  in that order that could lead and whose node looks alive, so that after a crash one
  survivor campaigns per group instead of all of them splitting the vote;
- each election that finds no leader widens the range of the next timeout (randomized
  backoff, as Kudu's), until a round trip fits in it whatever the load;
- the node lets only so many groups campaign at once (actors/replica/campaigns.py).
Only timers change: terms, votes and the log check decide as before.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
from collections.abc import Callable

import structlog

from quorumlog.log.batch import BatchType, build_batch
from quorumlog.membership.quorum import VoteResult
from quorumlog.raft import witness
from quorumlog.raft.leader import Leadership
from quorumlog.raft.messages import VoteReply, VoteRequest
from quorumlog.raft.roles import Role
from quorumlog.raft.settings import RaftSettings

logger = structlog.get_logger("quorumlog.raft")


# Each election that finds no leader multiplies the range of the next timeout by this,
# up to ELECTION_BACKOFF_MAX times the configured maximum.
ELECTION_BACKOFF = 1.5
ELECTION_BACKOFF_MAX = 10.0
ELECTION_BACKOFF_STEPS_MAX = 8  # 1.5**8 > 10: more steps change nothing


@functools.lru_cache(maxsize=8192)
def election_order(group_id: int, voters: frozenset[int]) -> tuple[int, ...]:
    """The order in which a group's voters take their turn to campaign: a shuffle by group
    id, the same on every node, that spreads the first turns evenly over the nodes."""

    def key(node_id: int) -> bytes:  # a real hash: CRC32's linearity gave node 1 half
        return hashlib.blake2b(b"%d:%d" % (group_id, node_id), digest_size=8).digest()

    return tuple(sorted(voters, key=key))


def barrier_batch() -> bytes:
    """The empty batch a new leader appends so that older entries commit through it."""
    return build_batch(b"", record_count=1, batch_type=BatchType.BARRIER)


class Election:
    """A voter's election timer and what paces it: the backoff after elections that found
    no leader, the turns given to the voters before it in the group's order, the late
    start of a node whose disk is slow; and the last time a leader was heard of, which
    the timer runs from and the lease counts from."""

    def __init__(self, group_id: int, settings: RaftSettings, rng: random.Random):
        self.group_id = group_id
        self.settings = settings
        self.rng = rng  # the core's: the draws stay in the order of its inputs
        self.deadline_s = 0.0
        self.turn_waited = False  # the timer ran out once and gave others a turn
        self.started = 0  # campaigns (not pre-votes) this replica started
        # Elections started since a leader was last heard of: they widen the timeout.
        self.failed = 0
        # Election timeouts a witness saw with no leader (raft/witness.py).
        self.timeouts_as_witness = 0
        self.last_leader_contact_s = -math.inf

    def reset(self, now: float, late: bool) -> None:
        """Start the timer again from `now`, at a random point of the (widened) range;
        `late`: an election timeout later, for a node whose disk was slow lately."""
        s = self.settings
        wait = s.election_timeout_max_s if late else 0.0
        # The exponent capped: a group cut off for hours counts thousands of elections.
        steps = min(self.failed, ELECTION_BACKOFF_STEPS_MAX)
        backoff = min(ELECTION_BACKOFF**steps, ELECTION_BACKOFF_MAX)
        high = (
            s.election_timeout_min_s
            + (s.election_timeout_max_s - s.election_timeout_min_s) * backoff
        )
        self.deadline_s = now + wait + self.rng.uniform(s.election_timeout_min_s, high)
        self.turn_waited = False

    def soon(self, now: float) -> None:
        """Run out at the next tick."""
        self.deadline_s = now

    def heard_from_leader(self, now: float, late: bool) -> None:
        self.last_leader_contact_s = now
        self.failed = 0
        self.timeouts_as_witness = 0
        self.reset(now, late)

    def leader_heard_meanwhile(self, heard_s: float) -> None:
        """The node heard from the leader at `heard_s` while the group was quiet."""
        self.last_leader_contact_s = max(self.last_leader_contact_s, heard_s)

    def pre_vote_started(self) -> None:
        """An election begins: it counts as failed until a leader is heard of."""
        self.failed += 1

    def campaign_started(self) -> None:
        self.started += 1

    def timed_out_unable_to_campaign(self) -> None:
        """The timer ran out on a replica that only votes (a witness, a node stopping)."""
        self.timeouts_as_witness += 1

    def won(self) -> None:
        """This replica leads: its elections found a leader."""
        self.failed = 0

    def leader_recent(self, now: float) -> bool:
        """Whether a leader was heard of within the minimum election timeout."""
        return now - self.last_leader_contact_s < self.settings.election_timeout_min_s

    def rank(self, self_id: int, voters: frozenset[int], contender: Callable[[int], bool]) -> int:
        """How many voters come before this one in the group's order that are contenders
        (could lead, and their node looks alive): the turns it gives them."""
        rank = 0
        for node_id in election_order(self.group_id, voters):
            if node_id == self_id:
                break
            rank += contender(node_id)
        return rank

    def wait_turns(self, now: float, rank: int) -> None:
        """Give the `rank` voters before this one a turn each (the range of a timeout)."""
        s = self.settings
        self.turn_waited = True
        self.deadline_s = now + rank * (s.election_timeout_max_s - s.election_timeout_min_s)


class ElectionRules:
    """RaftCore's election rules (mixed into RaftCore, whose state they use)."""

    def campaign_soon(self, now: float) -> None:
        """Start an election at the next tick: a new group's preferred leader goes first
        (its placement spreads leaders evenly)."""
        self.election.soon(now)

    def campaign_due(self, now: float) -> bool:
        """Whether a tick now starts a pre-vote: the election timer ran out, and this
        voter's turn in the group's order came (the node may still make it wait for a
        campaign slot: actors/replica/campaigns.py)."""
        if self.role in (Role.LEADER, Role.LEARNER) or now < self.election.deadline_s:
            return False
        if self.conditions.stopping:
            return False
        if not self.configs.may_campaign(self.id):
            return witness.may_campaign(self.config, self.id, self.election.timeouts_as_witness)
        return self.election.turn_waited or self._campaign_rank() == 0

    def _campaign_rank(self) -> int:
        """The turns this voter gives the others before it campaigns (`Election.rank`)."""
        unreachable = self.conditions.unreachable
        return self.election.rank(
            self.id,
            self.config.voters,
            lambda n: self.configs.can_lead(n) and n not in unreachable,
        )

    def _on_election_timeout(self, now: float) -> None:
        if self.campaign_due(now):
            self._start_pre_vote(now)
        elif self.conditions.stopping or not self.configs.may_campaign(self.id):
            self._reset_election_deadline(now)  # a witness (or a node stopping) only votes
            self.election.timed_out_unable_to_campaign()
        else:
            self.election.wait_turns(now, self._campaign_rank())  # voters before it first

    def _start_pre_vote(self, now: float) -> None:
        self.election.pre_vote_started()
        self.role = Role.PRE_CANDIDATE
        self.leader_id = None
        self.tracker.start_votes(self.id)
        self._reset_election_deadline(now)
        self._request_votes(self.term + 1, pre_vote=True, transfer=False)
        self._count_votes(now)

    def _campaign(self, now: float, transfer: bool = False) -> None:
        self.election.campaign_started()
        self._set_term(self.term + 1, self.id)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.tracker.start_votes(self.id)
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
            group=self.group_id,
            term=term,
            candidate_id=self.id,
            last_offset=self.log.dirty_offset,
            last_term=self.log.last_term,
            pre_vote=pre_vote,
            transfer=transfer,
        )
        for voter in self.config.voters - {self.id}:
            self._send(voter, request)

    def _count_votes(self, now: float) -> None:
        result = self.tracker.vote_result(self.config)
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
        self.election.won()
        self.leading = Leadership(since_s=now)
        self.tracker.reset()
        self._sync_progress()
        self.log.append([barrier_batch()], self.term)
        self.leading.awaited_offset = self.log.dirty_offset
        self.outbox.flush_soon()
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
        may_vote = self.log.dirty_offset >= self.hard.meta.vote_after_offset
        # A replica that waits to be added (no configuration yet) votes for no one: it may
        # be a node's new replica of a group it was moved out of, its log deleted, and a
        # replica left behind with a configuration from before the move would count it
        # (simulation seed 10006 of the topic changes: two leaders, one of a stale set).
        may_vote = may_vote and self.config is not None
        if req.pre_vote:
            granted = (
                may_vote
                and up_to_date
                and req.term > self.term
                and (req.transfer or not self._in_lease(now))
            )
            reply_term = req.term if granted else self.term
            self._send(sender, self._vote_reply(reply_term, granted, pre_vote=True))
            return
        granted = may_vote and up_to_date and self.hard.meta.voted_for in (None, req.candidate_id)
        if granted and self.hard.meta.voted_for is None:
            self._set_term(self.term, req.candidate_id)
        if granted:
            self._reset_election_deadline(now)
        self._send(sender, self._vote_reply(self.term, granted, pre_vote=False))

    def _vote_reply(self, term: int, granted: bool, pre_vote: bool) -> VoteReply:
        return VoteReply(
            group=self.group_id, node_id=self.id, term=term, granted=granted, pre_vote=pre_vote
        )

    def _on_vote_reply(self, sender: int, reply: VoteReply, now: float) -> None:
        if reply.pre_vote != (self.role is Role.PRE_CANDIDATE):
            return
        if self.role not in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            return
        self.tracker.record_vote(sender, reply.granted)
        self._count_votes(now)

    def _check_quorum(self, now: float) -> None:
        """Step down if a majority has not answered within an election timeout."""
        window = self.settings.election_timeout_max_s
        if now - self.leading.since_s < window:
            return
        if not self.tracker.quorum_heard(self.config, self.id, now, window):
            logger.warning(
                "lost_quorum_contact", node_id=self.id, group=self.group_id, term=self.term
            )
            self.become_follower(self.term, None, now)
