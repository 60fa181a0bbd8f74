"""What a core remembers of the batches in its log besides their offsets and terms: the
idempotent producers' appends (raft/producers.py), the latest batches flagged SNAPSHOT,
and the largest leader stamp. Told of every batch placed in the log, and of every cut."""

from __future__ import annotations

from quorumlog.log.batch import LOG_APPEND_TIME, SNAPSHOT, BatchHeader
from quorumlog.raft.producers import ProducerTable

SNAPSHOTS_KEPT = 4


class LogIndex:
    def __init__(self) -> None:
        self.producers = ProducerTable()
        # The latest batches flagged SNAPSHOT (a state machine's whole state): a log
        # compacted to its snapshots keeps the last committed one and what follows.
        self.snapshot_offsets: list[int] = []
        # The largest leader stamp in the log (log-append time, actors/replica/stamper.py).
        self.max_stamp_ms = 0

    def note(self, header: BatchHeader, now: float, producers: bool = True) -> None:
        """A placed data batch now in the log (`producers`: its producer's sequence counts;
        not for batches older than a restart's scan)."""
        if header.flags & LOG_APPEND_TIME:
            self.max_stamp_ms = max(self.max_stamp_ms, header.timestamp_ms)
        if header.flags & SNAPSHOT:
            self._note_snapshot(header.base_offset)
        if producers:
            self.producers.note_batch(header, now)

    def _note_snapshot(self, offset: int) -> None:
        self.snapshot_offsets = [*self.snapshot_offsets[1 - SNAPSHOTS_KEPT :], offset]

    def truncated(self, from_offset: int) -> None:
        """The log lost everything from `from_offset` on (0: the whole log)."""
        self.producers.truncate(from_offset)
        self.snapshot_offsets = [o for o in self.snapshot_offsets if o < from_offset]

    def committed(self, commit_offset: int, now: float) -> None:
        self.producers.forget_committed(commit_offset)
        self.producers.expire_idle(now)

    def committed_snapshot(self, commit_offset: int) -> int | None:
        """The last committed batch flagged SNAPSHOT: in a log compacted to its snapshots,
        what comes before it may go (retention drops committed records only)."""
        committed = [o for o in self.snapshot_offsets if o <= commit_offset]
        return committed[-1] if committed else None
