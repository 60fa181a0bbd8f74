"""Queue mode as a pure state machine: the window of in-flight records of one partition
for one group (Kafka's share-partition, KIP-932).

Every record from `start` on is in the window until it is settled. A record is available,
leased to one member, acked, or dead (moved to the dead-letter topic); `start` moves past
the records settled at the front, so everything below it is settled for good. `next` is
the first offset never leased yet: new records enter the window there, and the window
spans at most WINDOW_MAX offsets. Offsets are record offsets, so a lease skips none but
records trimmed away (quorumlog 0.4 counted log positions, and skipped those of Raft's own
batches: actors/coordinator/offsets_upgrade.py turns them). A full window leases no new record until its oldest
settles: members get only redeliveries meanwhile, and the lag shows it.

Leases, acks, releases and dead letters are commands in the group's `__groups` partition
(appended with acks=quorum), so a new coordinator rebuilds the window with every
delivery count and every ack: it never hands out an acked record again, and a record
leased before the failover is leased again only once its lease runs out (lease deadlines
are the coordinator's soft state: a new coordinator gives every lease a fresh one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

WINDOW_MAX = 8_000  # records in flight per partition and group


class RecordState(Enum):
    AVAILABLE = "available"
    LEASED = "leased"
    ACKED = "acked"
    DEAD = "dead"


SETTLED = frozenset({RecordState.ACKED, RecordState.DEAD})


@dataclass(slots=True)
class InFlight:
    state: RecordState = RecordState.AVAILABLE
    deliveries: int = 0
    member: str | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """Offsets handed to `member`: each is available in the window, or the next ones."""

    group: str
    topic: str
    partition: int
    member: str
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Settle:
    """`outcome` for offsets: "ack" and "release" by the member holding their lease,
    "expire" (the lease ran out) and "dead" (moved to the dead-letter topic) by the
    coordinator."""

    group: str
    topic: str
    partition: int
    member: str | None
    offsets: tuple[int, ...]
    outcome: str


OUTCOMES = ("ack", "release", "expire", "dead")


@dataclass(slots=True)
class SharePartition:
    start: int = 0
    next: int = 0
    records: dict[int, InFlight] = field(default_factory=dict)  # start <= offset < next
    # The offsets of the records AVAILABLE again (released or expired): an index, so that a
    # lease call need not look at every record in flight.
    available: set[int] = field(default_factory=set, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.available = {o for o, r in self.records.items() if r.state is RecordState.AVAILABLE}

    def redeliverable(self, max_records: int, deliveries_max: int) -> list[int]:
        """Records in the window to lease again, oldest first: available (released or
        expired) and delivered fewer than `deliveries_max` times."""
        records = self.records
        return sorted(o for o in self.available if records[o].deliveries < deliveries_max)[
            :max_records
        ]

    @property
    def bound(self) -> int:
        """The first offset the window cannot take now (it holds at most WINDOW_MAX)."""
        return self.start + WINDOW_MAX

    def exhausted(self, deliveries_max: int) -> list[int]:
        """Available records delivered `deliveries_max` times: for the dead-letter topic."""
        records = self.records
        return sorted(o for o in self.available if records[o].deliveries >= deliveries_max)

    def leased_count(self) -> int:
        return sum(r.state is RecordState.LEASED for r in self.records.values())

    def leased_to(self, member: str) -> list[int]:
        return sorted(
            o
            for o, r in self.records.items()
            if r.state is RecordState.LEASED and r.member == member
        )

    def check_lease(self, offsets: tuple[int, ...]) -> str | None:
        """New offsets (from `next` on) must increase; those skipped were trimmed away
        (or, in 0.4's logs, were Raft's own batches), never delivered and settled as they
        are."""
        last_new = self.next - 1
        for o in offsets:
            if o >= self.next:
                if o <= last_new:
                    return f"new offsets increase: {o} comes after {last_new}"
                if o >= self.bound:
                    return f"the window holds at most {WINDOW_MAX} records in flight"
                last_new = o
            elif o < self.start or o not in self.records:
                return f"offset {o} is not in the window"
            elif self.records[o].state is not RecordState.AVAILABLE:
                return f"offset {o} is not available to lease"
        return None

    def check_settle(
        self, member: str | None, offsets: tuple[int, ...], outcome: str
    ) -> str | None:
        if outcome not in OUTCOMES:
            return f"unknown outcome {outcome!r}"
        for o in offsets:
            record = self.records.get(o) if self.start <= o < self.next else None
            if outcome == "dead":
                if record is None or record.state is not RecordState.AVAILABLE:
                    return f"offset {o} is not waiting for a dead letter"
            elif record is None or record.state is not RecordState.LEASED:
                return f"offset {o} is not leased"
            elif outcome != "expire" and record.member != member:
                return f"offset {o} is not leased to member {member!r}"
        return None

    def lease(self, command: Lease) -> str | None:
        why = self.check_lease(command.offsets)
        if why is not None:
            return why
        for o in command.offsets:
            record = self.records.setdefault(o, InFlight())
            record.state, record.member = RecordState.LEASED, command.member
            record.deliveries += 1
            self.available.discard(o)
            self.next = max(self.next, o + 1)
        return None

    def settle(self, command: Settle) -> str | None:
        why = self.check_settle(command.member, command.offsets, command.outcome)
        if why is not None:
            return why
        state = {
            "ack": RecordState.ACKED,
            "dead": RecordState.DEAD,
        }.get(command.outcome, RecordState.AVAILABLE)
        for o in command.offsets:
            record = self.records[o]
            record.state, record.member = state, None
            if state is RecordState.AVAILABLE:
                self.available.add(o)
            else:
                self.available.discard(o)
        self._advance()
        return None

    def release_member(self, member: str) -> None:
        """A member left or was removed: what it held is available again at once."""
        for o, record in self.records.items():
            if record.state is RecordState.LEASED and record.member == member:
                record.state, record.member = RecordState.AVAILABLE, None
                self.available.add(o)

    def _advance(self) -> None:
        """Move `start` past the settled front (offsets not in `records` below `next` were
        skipped by a lease: settled from the start)."""
        while self.start < self.next:
            record = self.records.get(self.start)
            if record is not None and record.state not in SETTLED:
                return
            self.records.pop(self.start, None)
            self.start += 1
