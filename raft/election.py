"""An election's timer and its pacing (Raft 5.2, dissertation 9.6; seeds 000-002); the
pre-votes, campaigns and votes it starts are the core's (raft/core.py), as are the role
changes they make.

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

from quorumlog.log.batch import BatchType, build_batch
from quorumlog.raft.settings import RaftSettings

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
