"""Idempotent producers: a retried append is answered with its original offsets.

An idempotent append is one batch whose header carries the producer's id and the append's
sequence number, so the table below is kept by every node from the batches it appends and
rebuilt from the log on start: a new leader knows what the old one wrote (Jepsen's Redpanda
2022 finding: a retry answered with an error and then written twice). One batch per append
keeps appends atomic: a truncation removes all of one or none. Each node keeps, per
producer, its recent appends, which may arrive in any order (a window of them is in
flight at once).

A producer that appended nothing for PRODUCER_IDLE_S is forgotten, as Kafka's
producer.id.expiration.ms does (a day, long past any client's retries): a client that
restarts takes a new id, so a node up for months would otherwise keep every id it saw, up
to PRODUCERS_MAX a partition. Idleness counts on the core's clock, the simulation's in
the simulation; a restart counts it again from its start for the ids it reads back.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from quorumlog.log.batch import BatchHeader

PRODUCERS_MAX = 100_000  # the least recently used are forgotten beyond this
# Appends remembered per producer: more than a client keeps in flight, since those may
# arrive in any order.
APPENDS_PER_PRODUCER_MAX = 1024
ORDER_MAX = 1_000_000
PRODUCER_IDLE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class ProducerAppend:
    seq: int
    first_offset: int
    last_offset: int


class StaleSequenceError(Exception):
    """A sequence older than the producer's remembered appends: its outcome is unknown here."""


class _Recent:
    __slots__ = ("appends", "forgotten_max", "last_s")

    def __init__(self) -> None:
        self.appends: OrderedDict[int, ProducerAppend] = OrderedDict()
        self.forgotten_max = -1  # highest sequence dropped to bound memory
        self.last_s = 0.0  # when it last appended


class ProducerTable:
    def __init__(self) -> None:
        # Least recently appended first.
        self._producers: OrderedDict[int, _Recent] = OrderedDict()
        # (first offset, producer, seq) in log order, of the appends not yet committed, so
        # that a truncation of the tail costs what it removes: a truncation never reaches
        # a committed offset, and committed entries leave (`forget_committed`). Kept for
        # every append until then, this held a million tuples per replica (issue 51).
        self._order: deque[tuple[int, int, int]] = deque(maxlen=ORDER_MAX)

    def find(self, producer_id: int, seq: int) -> ProducerAppend | None:
        """The earlier append with this sequence, or None if it is new."""
        recent = self._producers.get(producer_id)
        if recent is None:
            return None
        append = recent.appends.get(seq)
        if append is None and seq <= recent.forgotten_max:
            raise StaleSequenceError(
                f"sequence {seq} of producer {producer_id} is too old to tell whether it was "
                "written"
            )
        return append

    def note_batch(self, header: BatchHeader, now: float) -> None:
        """Account for a batch appended to the log (leader or follower) at `now`: one
        without a sequence (a transaction's marker, a batch the cleaner rewrote) is not an
        idempotent append."""
        if header.producer_id < 0 or header.producer_seq < 0:
            return
        recent = self._producers.get(header.producer_id)
        if recent is None:
            recent = self._producers[header.producer_id] = _Recent()
            if len(self._producers) > PRODUCERS_MAX:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(header.producer_id)
        recent.last_s = now
        seq = header.producer_seq
        recent.appends[seq] = ProducerAppend(seq, header.base_offset, header.last_offset)
        self._order.append((header.base_offset, header.producer_id, seq))
        if len(recent.appends) > APPENDS_PER_PRODUCER_MAX:
            forgotten, _ = recent.appends.popitem(last=False)
            recent.forgotten_max = max(recent.forgotten_max, forgotten)

    def expire_idle(self, now: float) -> None:
        """Forget the producers that appended nothing for PRODUCER_IDLE_S."""
        producers = self._producers
        while producers:
            producer_id, recent = next(iter(producers.items()))
            if now - recent.last_s < PRODUCER_IDLE_S:
                return
            del producers[producer_id]

    def __len__(self) -> int:
        return len(self._producers)

    @property
    def uncommitted(self) -> int:
        """Appends held in log order (those not yet committed)."""
        return len(self._order)

    def forget_committed(self, commit_offset: int) -> None:
        """The appends up to `commit_offset` are committed: no truncation removes them."""
        order = self._order
        while order and order[0][0] <= commit_offset:
            order.popleft()

    def truncate(self, from_offset: int) -> None:
        """Forget appends at or after `from_offset` (a truncated suffix)."""
        order = self._order
        while order and order[-1][0] >= from_offset:
            first_offset, producer_id, seq = order.pop()
            recent = self._producers.get(producer_id)
            if recent is not None:
                append = recent.appends.get(seq)
                if append is not None and append.first_offset == first_offset:
                    del recent.appends[seq]
