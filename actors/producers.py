"""Idempotent producers: a retried append is answered with its original offsets.

An idempotent append is one batch whose header carries the producer's id and the append's
sequence number, so the table below is kept by every node from the batches it appends and
rebuilt from the log on start: a new leader knows what the old one wrote (Jepsen's Redpanda
2022 finding: a retry answered with an error and then written twice). One batch per append
keeps appends atomic: a truncation removes all of one or none. Each node keeps, per
producer, its last few appends. Sequences must grow; gaps are allowed (a failed append
leaves one).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from log.batch import BatchHeader

PRODUCERS_MAX = 100_000  # the least recently used are forgotten beyond this
APPENDS_PER_PRODUCER_MAX = 8


@dataclass(frozen=True, slots=True)
class ProducerAppend:
    seq: int
    first_offset: int
    last_offset: int


class StaleSequenceError(Exception):
    """A sequence older than the producer's recent appends: its outcome is not known here."""


class ProducerTable:
    def __init__(self) -> None:
        self._appends: OrderedDict[int, list[ProducerAppend]] = OrderedDict()

    def find(self, producer_id: int, seq: int) -> ProducerAppend | None:
        """The earlier append with this sequence, or None if it is new."""
        recent = self._appends.get(producer_id)
        if not recent:
            return None
        for append in recent:
            if append.seq == seq:
                return append
        if seq < recent[-1].seq:
            raise StaleSequenceError(
                f"sequence {seq} of producer {producer_id} is older than its last ({recent[-1].seq})"
            )
        return None

    def note_batch(self, header: BatchHeader) -> None:
        """Account for a batch appended to the log (leader or follower)."""
        if header.producer_id < 0:
            return
        recent = self._appends.get(header.producer_id)
        if recent is None:
            recent = self._appends[header.producer_id] = []
            if len(self._appends) > PRODUCERS_MAX:
                self._appends.popitem(last=False)
        else:
            self._appends.move_to_end(header.producer_id)
        recent.append(ProducerAppend(header.producer_seq, header.base_offset, header.last_offset))
        del recent[:-APPENDS_PER_PRODUCER_MAX]

    def truncate(self, from_offset: int) -> None:
        """Forget appends at or after `from_offset` (a truncated suffix)."""
        for producer_id in list(self._appends):
            kept = [a for a in self._appends[producer_id] if a.first_offset < from_offset]
            if kept:
                self._appends[producer_id] = kept
            else:
                del self._appends[producer_id]
