"""What a leader knows of one follower (Redpanda's follower_index_metadata, etcd's Progress)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from membership.catchup import ReplicationRate


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
    # AppendEntries sent and not yet answered.
    inflight: int = 0
    # Looking for the match point: one request at a time until a success.
    probing: bool = True
    # More than one chunk behind: streamed in chunks without follower flushes (seed 004).
    recovering: bool = False
    recovery_started_bytes: int = 0  # the leader's recovery byte count when it began
    # Size of the last chunk sent: batches larger than a chunk make larger chunks, and the
    # recovery window counts in these, so that its bytes stay bounded.
    chunk_bytes: int = 0
    # How fast the match offset moves (kept for learners: the promotion rule).
    rate: ReplicationRate = field(default_factory=ReplicationRate)
    last_contact_s: float = -math.inf
    last_reply_s: float = -math.inf

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
