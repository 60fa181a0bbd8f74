"""What a leader knows of each follower (Redpanda's follower_index_metadata, etcd's
Progress), and the tracker that holds them with a candidate's votes and answers the quorum
questions (etcd's tracker.ProgressTracker)."""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable, Iterator, KeysView, Mapping
from dataclasses import dataclass, field

from quorumlog.membership.catchup import ReplicationRate
from quorumlog.membership.config import Configuration
from quorumlog.membership.quorum import VoteResult, committed_offset, has_quorum, vote_result

# Messages in flight to a recovering follower (or chunks of a back-fill) at most, whatever
# the chunk size: a connection's send queue holds 128 frames (transport.network.Limits),
# heartbeats included.
RECOVERY_INFLIGHT_MAX = 64


class ReplicationState(enum.Enum):
    """What a leader is doing with one follower (etcd's tracker states)."""

    PROBE = "probe"  # looking for the match point: one request at a time
    REPLICATE = "replicate"  # steady: up to steady_inflight_max requests in flight
    # More than one chunk behind: chunks in a window of bytes, no follower flush for each
    # (seed 004's recovery; where etcd would send a snapshot).
    RECOVER = "recover"


@dataclass(slots=True)
class BackfillCopy:
    """A copy under way of the offsets [start, end) to a follower whose log starts at
    `end` (raft/backfill.py): it holds those below `acked`, and more are in flight."""

    start: int
    end: int
    next_offset: int
    acked: int
    inflight: int = 0
    last_reply_s: float = -math.inf

    def send_again(self) -> None:
        """What is in flight is lost: continue from what the follower holds."""
        self.next_offset, self.inflight = self.acked, 0


@dataclass(slots=True)
class Progress:
    node_id: int
    # Next offset to send: always the start of a batch in the leader's log.
    next_offset: int
    # Highest offset known to match the leader's log. Never decreases within a term.
    match_offset: int = -1
    # The follower's reported flushed and dirty offsets (both at most what matches).
    flushed_offset: int = -1
    dirty_offset: int = -1
    # AppendEntries sent and not yet answered, oldest first: (last offset it carries, its
    # bytes). A reply frees those it covers (etcd's inflights), so a late duplicate of an
    # answered one frees nothing.
    inflight: deque[tuple[int, int]] = field(default_factory=deque)
    inflight_bytes: int = 0
    state: ReplicationState = ReplicationState.PROBE
    recovery_started_bytes: int = 0  # the leader's recovery byte count when it began
    # How fast the match offset moves (kept for learners: the promotion rule).
    rate: ReplicationRate = field(default_factory=ReplicationRate)
    last_contact_s: float = -math.inf
    last_reply_s: float = -math.inf
    advanced_s: float = -math.inf  # when its match offset last grew (or it was tracked)
    # A witness joining as a learner starts its log here (the commit offset + 1 when it was
    # added) instead of copying the log: it needs only what is not yet committed.
    floor: int = 0
    # Where the follower's log starts, as it last said (None: not heard from).
    log_start: int | None = None
    # Asked to hold the whole log (a witness to be promoted): the copy of what it lacks.
    backfill_wanted: bool = False
    backfill: BackfillCopy | None = None
    # The commit offset it last reported.
    commit_offset: int = -1
    # A node no configuration this leader knows lists any more (removed, or one that asked
    # for votes): replicated to until it reports a commit at or past the committed
    # configuration, which tells it that it was removed, or until this time passes
    # (raft/reconfiguration.py `sync_progress`). None: a member.
    departing_until_s: float | None = None

    def sent(self, last_offset: int, size: int) -> None:
        self.inflight.append((last_offset, size))
        self.inflight_bytes += size

    def answered_to(self, offset: int) -> None:
        """The follower holds everything up to `offset`: those messages are answered."""
        inflight = self.inflight
        while inflight and inflight[0][0] <= offset:
            self.inflight_bytes -= inflight.popleft()[1]

    def forget_inflight(self) -> None:
        """Lost or refused: whatever is in flight will be sent again."""
        self.inflight.clear()
        self.inflight_bytes = 0

    def probe(self) -> None:
        """What is in flight was lost or refused: look for the match point again."""
        self.forget_inflight()
        self.state = ReplicationState.PROBE

    def matched(self) -> None:
        """The match point is found: replicate from just past it."""
        self.forget_inflight()
        self.state = ReplicationState.REPLICATE
        self.next_offset = self.match_offset + 1

    def recover(self, bytes_sent: int) -> None:
        """More than one chunk behind: stream it chunks (seed 004)."""
        self.state = ReplicationState.RECOVER
        self.recovery_started_bytes = bytes_sent

    @property
    def probing(self) -> bool:
        return self.state is ReplicationState.PROBE

    @property
    def recovering(self) -> bool:
        return self.state is ReplicationState.RECOVER

    @property
    def acked_offset(self) -> int:
        """What this follower contributes to the commit: matching and flushed (seed 004)."""
        return min(self.match_offset, self.flushed_offset)

    def to_json(self) -> dict:
        return {
            "match": self.match_offset,
            "flushed": self.flushed_offset,
            "dirty": self.dirty_offset,
            "recovering": self.recovering,
        }


class ProgressTracker:
    """The followers a leader replicates to, each one's Progress in the order it was
    tracked (the order of sends), and the votes of a campaign. The core decides; this
    answers what a majority holds, heard or granted."""

    def __init__(self) -> None:
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}
        # Bytes this node's leaderships sent over recovery streams (a metric).
        self.recovery_bytes_sent = 0

    def __iter__(self) -> Iterator[Progress]:
        return iter(self.progress.values())

    def __contains__(self, peer: int) -> bool:
        return peer in self.progress

    def get(self, peer: int) -> Progress | None:
        return self.progress.get(peer)

    def peers(self) -> KeysView[int]:
        return self.progress.keys()

    def reset(self) -> None:
        """A new role: no followers, no votes."""
        self.progress.clear()
        self.votes.clear()

    def track(self, p: Progress) -> None:
        self.progress[p.node_id] = p

    def release_departed(self, committed_config_offset: int, now: float) -> None:
        """Stop replicating to a node outside the configuration once it holds its removal
        committed, or once its time to learn it ran out (raft/reconfiguration.py)."""
        for peer, p in list(self.progress.items()):
            if p.departing_until_s is not None and (
                p.commit_offset >= committed_config_offset or now >= p.departing_until_s
            ):
                del self.progress[peer]

    # ----------------------------------------------------------------------- votes

    def start_votes(self, self_id: int) -> None:
        self.votes = {self_id: True}

    def record_vote(self, voter: int, granted: bool) -> None:
        self.votes[voter] = granted

    def clear_votes(self) -> None:
        self.votes.clear()

    def vote_result(self, config: Configuration) -> VoteResult:
        return vote_result(config, self.votes)

    # ----------------------------------------------------------------------- quorums

    def committed(self, config: Configuration, self_id: int, own_durable: int) -> int:
        """The highest offset a majority of voters holds matching and flushed, the leader
        counted with its own durable offset like any other."""
        acked = {p.node_id: p.acked_offset for p in self.progress.values()}
        acked[self_id] = own_durable
        return committed_offset(config, acked)

    def majority_offsets(
        self, config: Configuration, self_id: int, own_flushed: int, own_dirty: int
    ) -> tuple[int, int]:
        """(flushed, dirty) offsets reached by a majority, as the leader sees them now."""
        flushed = {p.node_id: p.flushed_offset for p in self.progress.values()}
        dirty = {p.node_id: p.match_offset for p in self.progress.values()}
        flushed[self_id] = own_flushed
        dirty[self_id] = own_dirty
        return committed_offset(config, flushed), committed_offset(config, dirty)

    def quorum_heard(self, config: Configuration, self_id: int, now: float, window: float) -> bool:
        """Whether a majority (this node with them) was heard from within `window`."""
        recent = {self_id} | {
            p.node_id for p in self.progress.values() if now - p.last_contact_s < window
        }
        return has_quorum(config, recent)

    def heard_within(self, now: float, window: float, may_lead: Callable[[int], bool]) -> list[int]:
        """The followers heard from within `window` that `may_lead`, in tracking order."""
        return [
            p.node_id
            for p in self.progress.values()
            if now - p.last_contact_s < window and may_lead(p.node_id)
        ]

    def note_contacts(self, contacts: Mapping[int, float]) -> None:
        """When the node last heard from each peer: a quiet follower sends no replies of
        its own, and must not look gone (raft/core.py `wake`)."""
        for p in self.progress.values():
            p.last_contact_s = max(p.last_contact_s, contacts.get(p.node_id, -math.inf))

    def settled(self, dirty: int, unreachable: frozenset[int]) -> bool:
        """Every reachable follower holds, has flushed and has answered up to `dirty`."""
        return all(
            p.match_offset == dirty
            and p.flushed_offset == dirty
            and not p.inflight
            and not p.probing
            and not p.backfill_wanted
            for p in self.progress.values()
            if p.node_id not in unreachable
        )

    def lagging_voter(
        self,
        config: Configuration,
        commit: int,
        unreachable: frozenset[int],
        now: float,
        window: float,
    ) -> bool:
        """Whether a voter is down, being recovered, or short of `commit` without progress
        for `window` (under-replication: raft/leader.py)."""
        return any(
            p.node_id in unreachable
            or p.recovering
            or (p.match_offset < commit and now - p.advanced_s > window)
            for p in self.progress.values()
            if config.is_voter(p.node_id)
        )
