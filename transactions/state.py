"""Transactions as a pure state machine: what a partition of the internal topic
`__transactions` holds about the transactional ids that hash to it (Kafka's transaction
log).

A transactional id has a producer (a number the coordinator chose, and an epoch that each
new session of the producer raises, fencing the one before), a state, the partitions its
open transaction wrote to, and that transaction's timeout. The coordinator (the leader of
the id's `__transactions` partition) decides everything that needs a choice (the number,
the next epoch, the time) before it appends a command, so applying one is deterministic on
every replica, and a new coordinator rebuilds the same state by applying the partition.

    EMPTY --add partitions--> ONGOING --end--> PREPARE_COMMIT / PREPARE_ABORT
      ^                          |                 | (markers written to every partition)
      |                          | fenced or       v
      +--- a new session --- COMPLETE_COMMIT / COMPLETE_ABORT <--+
                                 timed out: PREPARE_ABORT at the next epoch

A transaction is decided when its PREPARE command commits: the markers are then written,
by this coordinator or the next (it finds the transaction prepared), and COMPLETE follows.
A command that is no longer valid when applied (an epoch a newer session fenced, a state
that moved on) changes nothing and says why.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

TRANSACTIONS_TOPIC = "__transactions"
TRANSACTIONS_PARTITIONS = 8  # coordinators spread over the nodes; fixed once the topic exists
TRANSACTIONAL_ID_CHARS_MAX = 200
# Kafka's broker limits: transaction.max.timeout.ms, and an epoch fits 16 bits (a new
# producer number is taken when it would not: EPOCH_MAX).
TIMEOUT_MS_MAX = 15 * 60 * 1000
EPOCH_MAX = 0x7FFF - 1

TopicPartition = tuple[str, int]


class TxnState(enum.StrEnum):
    EMPTY = "empty"
    ONGOING = "ongoing"
    PREPARE_COMMIT = "prepare_commit"
    PREPARE_ABORT = "prepare_abort"
    COMPLETE_COMMIT = "complete_commit"
    COMPLETE_ABORT = "complete_abort"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def ended(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


class CommandError(ValueError):
    """A command's wire form is malformed."""


def transactions_partition(transactional_id: str, partitions: int) -> int:
    """The `__transactions` partition that holds `transactional_id`: a stable hash, the
    same on every node and in every version."""
    return zlib.crc32(transactional_id.encode()) % partitions


# --- commands -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitProducer:
    """A producer session begins: the id's producer becomes (number, epoch), with no
    transaction open. `prior` is the (number, epoch) the coordinator found, (-1, -1) for a
    new id: a command decided on a state that changed since changes nothing."""

    transactional_id: str
    number: int
    epoch: int
    timeout_ms: int
    prior: tuple[int, int]
    now_ms: int


@dataclass(frozen=True, slots=True)
class AddPartitions:
    """The open transaction (opened now if none is) wrote to these partitions too."""

    transactional_id: str
    number: int
    epoch: int
    partitions: tuple[TopicPartition, ...]
    now_ms: int


@dataclass(frozen=True, slots=True)
class Prepare:
    """The open transaction is decided: commit or abort. `epoch` above the producer's
    fences it (a new session, or the timeout, aborts what the old one left open)."""

    transactional_id: str
    number: int
    epoch: int
    commit: bool
    now_ms: int


@dataclass(frozen=True, slots=True)
class Complete:
    """Every partition of the prepared transaction has its marker."""

    transactional_id: str
    number: int
    epoch: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class Expire:
    """An id idle for transactional.id.expiration.ms is forgotten (its next session
    gets a new number)."""

    transactional_id: str
    number: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The partition's whole state (every id's), so that what came before may go."""

    ids: tuple[dict[str, Any], ...]


Command = InitProducer | AddPartitions | Prepare | Complete | Expire | Snapshot
_TYPES: dict[str, type] = {cls.__name__: cls for cls in Command.__args__}


def to_wire(command: Command) -> dict[str, Any]:
    return {"type": type(command).__name__} | {
        f.name: getattr(command, f.name) for f in fields(command)
    }


def from_wire(wire: Any) -> Command:
    """A command from its msgpack form; CommandError if malformed."""
    if not isinstance(wire, dict):
        raise CommandError(f"a command is a map, not {type(wire).__name__}")
    cls = _TYPES.get(wire.get("type"))
    if cls is None:
        raise CommandError(f"unknown command type {wire.get('type')!r}")
    args = {k: v for k, v in wire.items() if k != "type"}
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING}
    if not required <= set(args) <= names:
        raise CommandError(f"{cls.__name__} has fields {sorted(names)}")
    try:
        if cls is Snapshot:
            args["ids"] = tuple(args["ids"])
            for entry in args["ids"]:
                _restore(entry)  # checked whole here: a bad one is refused as it is read
            return cls(**args)
        args["transactional_id"] = str(args["transactional_id"])
        for name in ("number", "epoch", "timeout_ms", "now_ms"):
            if name in args:
                args[name] = int(args[name])
        if "prior" in args:
            number, epoch = args["prior"]
            args["prior"] = (int(number), int(epoch))
        if "partitions" in args:
            args["partitions"] = tuple((str(t), int(p)) for t, p in args["partitions"])
        if "commit" in args:
            args["commit"] = bool(args["commit"])
        return cls(**args)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CommandError(f"bad {cls.__name__}: {exc}") from None


# --- state ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Txn:
    """One transactional id's hard state."""

    number: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartition] = frozenset()
    started_ms: int = -1  # when the open transaction began (-1: none is open)
    updated_ms: int = 0  # when it last changed (expiry counts from it)

    @property
    def producer(self) -> tuple[int, int]:
        return self.number, self.epoch


@dataclass(slots=True)
class TransactionsState:
    """Every transactional id of one `__transactions` partition."""

    ids: dict[str, Txn] = field(default_factory=dict)
    applied_offset: int = -1
    # False while applying a log that starts after offset 0, until its first snapshot.
    whole: bool = True

    def apply(self, command: Command, offset: int) -> str | None:
        """Apply a committed command at `offset`; returns why it changed nothing, or None."""
        assert offset > self.applied_offset, (offset, self.applied_offset)
        self.applied_offset = offset
        if isinstance(command, Snapshot):
            self.ids = dict(_restore(entry) for entry in command.ids)
            self.whole = True
            return None
        if not self.whole:
            return "before the first snapshot of a compacted log (it holds what this did)"
        name = command.transactional_id
        txn = self.ids.get(name)
        if isinstance(command, InitProducer):
            found = (-1, -1) if txn is None else txn.producer
            if found != command.prior:
                return f"{name!r}'s producer is {found}, not {command.prior}: decided again"
            if txn is not None and not txn.state.ended:
                return f"{name!r} has a transaction {txn.state}: it ends first"
            self.ids[name] = Txn(
                command.number, command.epoch, command.timeout_ms, updated_ms=command.now_ms
            )
            return None
        if txn is None:
            return f"unknown transactional id {name!r}"
        if command.number != txn.number:
            return f"{name!r}'s producer is {txn.number}, not {command.number}"
        match command:
            case AddPartitions(_, _, epoch, partitions, now_ms):
                if epoch != txn.epoch:
                    return f"epoch {epoch} of {name!r} is fenced by {txn.epoch}"
                if txn.state.preparing:
                    return f"{name!r}'s transaction is ending ({txn.state})"
                opened = txn.state is not TxnState.ONGOING
                self.ids[name] = replace(
                    txn,
                    state=TxnState.ONGOING,
                    partitions=(frozenset() if opened else txn.partitions) | set(partitions),
                    started_ms=now_ms if opened else txn.started_ms,
                    updated_ms=now_ms,
                )
            case Prepare(_, _, epoch, commit, now_ms):
                if epoch < txn.epoch or (epoch > txn.epoch and commit):
                    return f"epoch {epoch} of {name!r} may not end its transaction ({txn.epoch})"
                if txn.state is not TxnState.ONGOING:
                    return f"{name!r} has no open transaction ({txn.state})"
                state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
                self.ids[name] = replace(txn, epoch=epoch, state=state, updated_ms=now_ms)
            case Complete(_, _, epoch, now_ms):
                if epoch != txn.epoch or not txn.state.preparing:
                    return f"{name!r} is not preparing at epoch {epoch} ({txn.state}, {txn.epoch})"
                state = (
                    TxnState.COMPLETE_COMMIT
                    if txn.state is TxnState.PREPARE_COMMIT
                    else TxnState.COMPLETE_ABORT
                )
                self.ids[name] = replace(
                    txn, state=state, partitions=frozenset(), started_ms=-1, updated_ms=now_ms
                )
            case Expire(_, _, epoch):
                if epoch != txn.epoch or not txn.state.ended:
                    return f"{name!r} changed since it was found idle"
                del self.ids[name]
        return None

    def preparing(self) -> list[tuple[str, Txn]]:
        """The transactions decided and not completed: their markers are still to write."""
        return [(name, txn) for name, txn in self.ids.items() if txn.state.preparing]

    def timed_out(self, now_ms: int) -> list[tuple[str, Txn]]:
        """The open transactions past their timeout: the coordinator aborts them."""
        return [
            (name, txn)
            for name, txn in self.ids.items()
            if txn.state is TxnState.ONGOING and now_ms - txn.started_ms > txn.timeout_ms
        ]


def next_producer(txn: Txn | None, new_number: int) -> tuple[int, int]:
    """The (number, epoch) of a new session of `txn`'s id: the next epoch, or `new_number`
    at epoch 0 for a new id or once the epochs are spent."""
    if txn is None or txn.epoch >= EPOCH_MAX:
        return new_number, 0
    return txn.number, txn.epoch + 1


def snapshot_of(state: TransactionsState) -> Snapshot:
    return Snapshot(
        tuple(
            {
                "id": name,
                "number": txn.number,
                "epoch": txn.epoch,
                "timeout_ms": txn.timeout_ms,
                "state": txn.state.value,
                "partitions": [list(tp) for tp in sorted(txn.partitions)],
                "started_ms": txn.started_ms,
                "updated_ms": txn.updated_ms,
            }
            for name, txn in sorted(state.ids.items())
        )
    )


def _restore(entry: dict[str, Any]) -> tuple[str, Txn]:
    try:
        return str(entry["id"]), Txn(
            int(entry["number"]),
            int(entry["epoch"]),
            int(entry["timeout_ms"]),
            TxnState(entry["state"]),
            frozenset((str(t), int(p)) for t, p in entry["partitions"]),
            int(entry["started_ms"]),
            int(entry["updated_ms"]),
        )
    except (TypeError, ValueError, KeyError) as exc:
        raise CommandError(f"bad transactional id in a snapshot: {exc}") from None


def check_transactional_id(name: Any) -> str:
    """A transactional id as a client may name one (one line for the user if not)."""
    if not isinstance(name, str) or not 1 <= len(name) <= TRANSACTIONAL_ID_CHARS_MAX:
        raise ValueError(f"a transactional id has 1-{TRANSACTIONAL_ID_CHARS_MAX} characters")
    return name
