"""What a leader knows of one follower (Redpanda's follower_index_metadata, etcd's Progress)."""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass, field

from quorumlog.membership.catchup import ReplicationRate


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
    # (raft/reconfiguration.py `_sync_progress`). None: a member.
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
