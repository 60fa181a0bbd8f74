"""Consumer groups as a pure state machine: what a partition of the internal topic
`__groups` holds about the groups that hash to it.

A group's hard state is its mode, topics, generation, members with their assignment, and
its committed positions (the next offset to consume, per topic partition). The coordinator
(the leader of the group's `__groups` partition) decides everything that needs a choice
(who is a member, the assignment) before it appends a command, so applying one is
deterministic on every replica, and a new coordinator rebuilds the same state by applying
the partition from its start. Liveness (when a member last heartbeated) is soft state of
the coordinator and never in the log: a new coordinator gives every member a fresh session.

A command that is no longer valid when applied (a commit fenced by a newer generation, a
position that would go back) changes nothing and says why, as the controller's do.

Every so often the coordinator appends a `Snapshot`: the partition's whole state, taken
with no other command in flight, so that it equals the state its predecessors built. The
log is compacted to its last committed snapshot (everything before goes: LogConfig.
compact_to_snapshots), and a replica that starts applying after offset 0 ignores what
precedes the first snapshot it meets (the state those commands built is in it).
"""

from __future__ import annotations

import zlib
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.queue import InFlight, Lease, RecordState, Settle, SharePartition

GROUPS_TOPIC = "__groups"
GROUPS_PARTITIONS = 8  # coordinators spread over the nodes; fixed once the topic exists
MODES = ("stream", "queue")
GROUP_NAME_CHARS_MAX = 200
SESSION_TIMEOUT_MS_MAX = 10 * 60 * 1000


class GroupError(ValueError):
    """A group call that can never succeed as asked (one line, for the user)."""


class CommandError(ValueError):
    """A command's wire form is malformed."""


def groups_partition(group: str, partitions: int) -> int:
    """The `__groups` partition that holds `group` (its coordinator leads it): a stable
    hash, the same on every node and in every version."""
    return zlib.crc32(group.encode()) % partitions


# --- commands -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetMembers:
    """A new generation: these members (id -> session timeout) with this assignment."""

    group: str
    mode: str
    topics: tuple[str, ...]
    generation: int
    members: tuple[tuple[str, int], ...]  # (member id, session timeout ms), sorted
    assignment: tuple[tuple[str, tuple[TopicPartition, ...]], ...]  # stream mode only


@dataclass(frozen=True, slots=True)
class Commit:
    """A member's positions (next offset to consume). Which partitions a member may commit
    is the coordinator's check before it appends (a member releasing a partition commits it
    after the assignment moved it, before the next owner is let in: actors/coordinator/coordinator.py);
    applying checks only what the log decides: it is still a member, nothing goes back."""

    group: str
    member: str
    offsets: tuple[tuple[str, int, int], ...]  # (topic, partition, offset)


@dataclass(frozen=True, slots=True)
class ResetOffsets:
    """`group reset-offsets`: positions set by an operator, while no member is active."""

    group: str
    offsets: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class DeleteOffsets:
    """Kafka's OffsetDelete: these partitions' positions go, but not while an active member
    consumes their topic (its consumers then start where their reset policy says)."""

    group: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    """`group delete`: the group and its positions go, while no member is active."""

    group: str


@dataclass(frozen=True, slots=True)
class ForgetTopics:
    """Topics the cluster deleted: their positions and queue windows leave every group of
    the partition, as Kafka's coordinator drops a deleted topic's offsets (a cluster that
    creates and deletes topics for months would otherwise keep them all). The coordinator
    appends it once the controller confirms them gone (actors/coordinator/coordinator.py); a topic made
    again under the same name starts with no position."""

    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TxnOffsets:
    """Kafka's TxnOffsetCommit: positions a transaction commits, held apart (not what the
    group has committed) until the transaction ends (EndTxnOffsets). `producer` is the
    transactional producer's number (transactions/state.py)."""

    group: str
    producer: int
    offsets: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class EndTxnOffsets:
    """The transaction of `producer` ended: the positions it held become the groups'
    committed ones (commit) or go (abort). Its coordinator's marker for this partition."""

    producer: int
    commit: bool


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every group of the partition, whole (`snapshot_of`)."""

    groups: tuple[dict[str, Any], ...]
    records: bool = False  # its offsets count records (a snapshot of 0.4's: positions)


@dataclass(frozen=True, slots=True)
class RecordOffsets:
    """From here on the partition's offsets count records. Before (quorumlog 0.4) they
    were log positions, which Raft's own batches took too: each position the state holds,
    with the record offset it is, by topic partition. The coordinator appends it once, as
    the first thing it does with a partition whose state does not count records yet (a
    new partition: with nothing to turn)."""

    offsets: tuple[tuple[str, int, tuple[tuple[int, int], ...]], ...]


Command = (
    SetMembers
    | Commit
    | ResetOffsets
    | DeleteOffsets
    | DeleteGroup
    | ForgetTopics
    | Lease
    | Settle
    | Snapshot
    | RecordOffsets
    | TxnOffsets
    | EndTxnOffsets
)
_TYPES: dict[str, type] = {cls.__name__: cls for cls in Command.__args__}


def to_wire(command: Command) -> dict[str, Any]:
    """Its msgpack form (the fields are plain values, tuples of them and dicts: no copy)."""
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
    required = {f.name for f in fields(cls) if f.default is MISSING}
    if not required <= set(args) <= {f.name for f in fields(cls)}:
        raise CommandError(f"{cls.__name__} has fields {sorted(f.name for f in fields(cls))}")
    try:
        if cls is Snapshot:
            args["groups"] = tuple(args["groups"])
            _restore(args["groups"])  # checked whole here: a bad one is refused as it is read
            args["records"] = bool(args.get("records", False))
        elif cls is RecordOffsets:
            args["offsets"] = tuple(
                (str(t), int(p), tuple((int(o), int(r)) for o, r in pairs))
                for t, p, pairs in args["offsets"]
            )
        elif cls in (Lease, Settle):
            args["offsets"] = tuple(int(o) for o in args["offsets"])
        elif cls is DeleteGroup:
            args["group"] = str(args["group"])
        elif cls is TxnOffsets:
            args["producer"] = int(args["producer"])
            args["offsets"] = tuple((str(t), int(p), int(o)) for t, p, o in args["offsets"])
        elif cls is EndTxnOffsets:
            args["producer"], args["commit"] = int(args["producer"]), bool(args["commit"])
        elif cls is ForgetTopics:
            args["topics"] = tuple(str(t) for t in args["topics"])
        elif cls is DeleteOffsets:
            args["partitions"] = tuple((str(t), int(p)) for t, p in args["partitions"])
        elif cls is SetMembers:
            args["topics"] = tuple(args["topics"])
            args["members"] = tuple((m, int(t)) for m, t in args["members"])
            args["assignment"] = tuple(
                (m, tuple((t, int(p)) for t, p in tps)) for m, tps in args["assignment"]
            )
        else:
            args["offsets"] = tuple((t, int(p), int(o)) for t, p, o in args["offsets"])
        return cls(**args)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CommandError(f"bad {cls.__name__}: {exc}") from None


# --- state ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Group:
    name: str
    mode: str
    topics: tuple[str, ...] = ()
    generation: int = 0
    members: dict[str, int] = field(default_factory=dict)  # member id -> session timeout ms
    assignment: dict[str, tuple[TopicPartition, ...]] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    queues: dict[TopicPartition, SharePartition] = field(default_factory=dict)  # queue mode
    # Positions open transactions commit, by transactional producer (TxnOffsets).
    pending: dict[int, dict[TopicPartition, int]] = field(default_factory=dict)

    def owner(self, tp: TopicPartition) -> str | None:
        return next((m for m, tps in self.assignment.items() if tp in tps), None)


@dataclass(slots=True)
class GroupsState:
    """Every group of one `__groups` partition."""

    groups: dict[str, Group] = field(default_factory=dict)
    applied_offset: int = -1
    # False while applying a log that starts after offset 0, until its first snapshot.
    whole: bool = True
    # Its offsets count records (RecordOffsets applied); before, they were log positions.
    records: bool = False

    def apply(self, command: Command, offset: int) -> str | None:
        """Apply a committed command at `offset`; returns why it changed nothing, or None."""
        assert offset > self.applied_offset, (offset, self.applied_offset)
        self.applied_offset = offset
        if isinstance(command, Snapshot):
            self.groups = _adopted(self.groups, _restore(command.groups))
            self.whole, self.records = True, command.records
            return None
        if isinstance(command, RecordOffsets):
            if self.records:
                return "its offsets count records already"
            turned = {(t, p): dict(pairs) for t, p, pairs in command.offsets}
            for group in self.groups.values():
                _count_records(group, turned)
            self.records = True
            return None
        if not self.whole:
            return "before the first snapshot of a compacted log (it holds what this did)"
        match command:
            case SetMembers(name, mode, topics, generation, members, assignment):
                group = self.groups.get(name)
                if group is not None and generation <= group.generation:
                    return f"generation {generation} of {name!r} is not after {group.generation}"
                if group is None:
                    group = self.groups[name] = Group(name, mode)
                group.mode, group.topics, group.generation = mode, topics, generation
                group.members = dict(members)
                group.assignment = dict(assignment)
                for window in group.queues.values():
                    for gone in {r.member for r in window.records.values()} - set(group.members):
                        if gone is not None:
                            window.release_member(gone)
            case Commit(name, member, offsets):
                group = self.groups.get(name)
                if group is None:
                    return f"unknown group {name!r}"
                why = check_commit(group, member, offsets)
                if why is not None:
                    return why
                for topic, partition, position in offsets:
                    group.committed[(topic, partition)] = position
            case ResetOffsets(name, offsets):
                group = self.groups.setdefault(name, Group(name, MODES[0]))
                if group.members:
                    return f"group {name!r} has active members: stop them first"
                for topic, partition, position in offsets:
                    group.committed[(topic, partition)] = position
                    group.queues.pop((topic, partition), None)  # queue mode starts there
            case DeleteOffsets(name, partitions):
                group = self.groups.get(name)
                if group is None:
                    return f"unknown group {name!r}"
                consumed = sorted({t for t, _ in partitions if t in group.topics})
                if group.members and consumed:
                    return f"group {name!r} has active members consuming {', '.join(consumed)}"
                for tp in partitions:
                    group.committed.pop(tp, None)
                    group.queues.pop(tp, None)
            case DeleteGroup(name):
                group = self.groups.get(name)
                if group is None:
                    return f"unknown group {name!r}"
                if group.members:
                    return f"group {name!r} has active members: stop them first"
                del self.groups[name]
            case ForgetTopics(topics):
                gone = set(topics)
                for group in self.groups.values():
                    for held in (group.committed, group.queues, *group.pending.values()):
                        for tp in [tp for tp in held if tp[0] in gone]:
                            del held[tp]
            case Lease() | Settle():
                return _apply_queue(self.groups.get(command.group), command)
            case TxnOffsets(name, producer, offsets):
                group = self.groups.setdefault(name, Group(name, MODES[0]))
                held = group.pending.setdefault(producer, {})
                held.update(((t, p), o) for t, p, o in offsets)
            case EndTxnOffsets(producer, commit):
                for group in self.groups.values():
                    held = group.pending.pop(producer, None)
                    if held and commit:
                        group.committed.update(held)
        return None


def held_offsets(state: GroupsState) -> dict[TopicPartition, set[int]]:
    """Every offset the state holds, by topic partition (what RecordOffsets turns)."""
    out: dict[TopicPartition, set[int]] = {}
    for group in state.groups.values():
        for tp, offset in group.committed.items():
            out.setdefault(tp, set()).add(offset)
        for tp, window in group.queues.items():
            out.setdefault(tp, set()).update((window.start, window.next, *window.records))
    return out


def _count_records(group: Group, turned: dict[TopicPartition, dict[int, int]]) -> None:
    """The group's offsets as `turned` maps them (those it does not name stay)."""
    for tp, offset in group.committed.items():
        group.committed[tp] = turned.get(tp, {}).get(offset, offset)
    for tp, window in group.queues.items():
        to = turned.get(tp, {})
        group.queues[tp] = SharePartition(
            to.get(window.start, window.start),
            to.get(window.next, window.next),
            {to.get(o, o): r for o, r in window.records.items()},
        )


def snapshot_of(state: GroupsState) -> Snapshot:
    """The whole state as a command (plain msgpack types)."""
    return Snapshot(
        tuple(
            {
                "name": g.name,
                "mode": g.mode,
                "topics": list(g.topics),
                "generation": g.generation,
                "members": [[m, t] for m, t in g.members.items()],
                "assignment": [[m, [list(tp) for tp in tps]] for m, tps in g.assignment.items()],
                "committed": [[t, p, o] for (t, p), o in g.committed.items()],
                "pending": [
                    [n, [[t, p, o] for (t, p), o in held.items()]] for n, held in g.pending.items()
                ],
                "queues": [
                    [
                        t,
                        p,
                        w.start,
                        w.next,
                        [[o, r.state.value, r.deliveries, r.member] for o, r in w.records.items()],
                    ]
                    for (t, p), w in g.queues.items()
                ],
            }
            for g in state.groups.values()
        ),
        state.records,
    )


def _restore(groups: tuple[dict[str, Any], ...]) -> list[Group]:
    """The groups of a snapshot; raises TypeError, ValueError or KeyError if malformed."""
    restored = []
    for g in groups:
        queues = {}
        for t, p, start, next_, records in g["queues"]:
            queues[(str(t), int(p))] = SharePartition(
                int(start),
                int(next_),
                {
                    int(o): InFlight(RecordState(state), int(deliveries), member)
                    for o, state, deliveries, member in records
                },
            )
        restored.append(
            Group(
                str(g["name"]),
                str(g["mode"]),
                tuple(g["topics"]),
                int(g["generation"]),
                {str(m): int(t) for m, t in g["members"]},
                {str(m): tuple((str(t), int(p)) for t, p in tps) for m, tps in g["assignment"]},
                {(str(t), int(p)): int(o) for t, p, o in g["committed"]},
                queues,
                {  # a snapshot of before transactions holds none
                    int(n): {(str(t), int(p)): int(o) for t, p, o in held}
                    for n, held in g.get("pending", ())
                },
            )
        )
    return restored


def _adopted(live: dict[str, Group], restored: list[Group]) -> dict[str, Group]:
    """The snapshot's groups, each written into the live object of the same name where
    there is one (and each window into the live window): a coordinator's call holds its
    group and windows across awaits, and a snapshot applied meanwhile (the coordinator's
    own, every 10,000 commands or minute) must not leave it deciding from copies that no
    longer change (a lease from offset 0 of a window that had moved on: bench consume)."""
    groups = {}
    for group in restored:
        kept = live.get(group.name)
        if kept is not None:
            windows = {
                tp: _adopted_window(kept.queues.get(tp), window)
                for tp, window in group.queues.items()
            }
            for f in fields(Group):
                setattr(kept, f.name, getattr(group, f.name))
            kept.queues, group = windows, kept
        groups[group.name] = group
    return groups


def _adopted_window(kept: SharePartition | None, window: SharePartition) -> SharePartition:
    if kept is None:
        return window
    kept.start, kept.next, kept.records = window.start, window.next, window.records
    kept.available = window.available
    return kept


def _apply_queue(group: Group | None, command: Lease | Settle) -> str | None:
    if group is None or group.mode != "queue":
        return f"{command.group!r} is not a queue-mode group"
    if command.member is not None and command.member not in group.members:
        return f"{command.member!r} is not a member of {group.name!r}: rejoin"
    tp = (command.topic, command.partition)
    window = group.queues.get(tp)
    if window is None:
        start = group.committed.get(tp, 0)
        window = group.queues[tp] = SharePartition(start, start)
    if isinstance(command, Lease):
        return window.lease(command)
    why = window.settle(command)
    group.committed[tp] = window.start  # everything before it is settled: the lag counts from it
    return why


def check_commit(
    group: Group, member: str, offsets: tuple[tuple[str, int, int], ...]
) -> str | None:
    """Why a stream member's commit must be refused: it is no longer a member (it left or
    its session expired: its partitions may have a new owner), or a position would go back."""
    if member not in group.members:
        return f"member {member!r} is not in the group {group.name!r}: rejoin"
    for topic, partition, position in offsets:
        if position < group.committed.get((topic, partition), 0):
            return (
                f"the committed position of {topic}/{partition} is "
                f"{group.committed[(topic, partition)]}: a commit never goes back"
            )
    return None


def check_group_name(name: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= GROUP_NAME_CHARS_MAX:
        raise GroupError(f"a group name has 1-{GROUP_NAME_CHARS_MAX} characters")
    if not name.isprintable():
        raise GroupError(f"a group name is printable text, not {name!r}")
    return name


def check_member_settings(mode: str, session_timeout_ms: int) -> None:
    if mode not in MODES:
        raise GroupError(f"mode is one of {', '.join(MODES)}, not {mode!r}")
    if not isinstance(session_timeout_ms, int) or not 0 < session_timeout_ms <= (
        SESSION_TIMEOUT_MS_MAX
    ):
        raise GroupError(
            f"a session timeout is more than 0 and at most {SESSION_TIMEOUT_MS_MAX // 1000} s"
        )
