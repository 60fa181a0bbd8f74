"""The controller's commands: what its log holds, one command per entry.

Each command is a value with a wire form (a msgpack-able dict with a "type" key); the
controller's leader decides everything that needs a choice (placement) before it appends
one, so that applying a command is deterministic on every node.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from quorumlog.log.config import CLEANUP_POLICIES, TIMESTAMP_TYPES, UNLIMITED, TopicSettings


class CommandError(ValueError):
    """A command's wire form is malformed."""


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A node joins the cluster, or comes back at a new address (its epoch then grows)."""

    node_id: int
    address: str


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    replicas: tuple[tuple[int, ...], ...]  # per partition, preferred leader first
    retention_bytes: int | None = None
    retention_ms: int | None = None
    timestamp_type: str = "create"  # whose clock stamps records (log/wal.py)
    segment_bytes_max: int | None = None
    max_message_bytes: int | None = None
    topic_id: str | None = None  # a UUID's text (controller/kafka_ids.py); None before ids
    # The settings added since (the cleanup policy and compaction's: fields of TopicSettings);
    # None when it sets none of them, so that a node of before reads the command.
    settings: dict[str, int | float | str | None] | None = None


_CREATE_FIELDS = {f.name for f in fields(CreateTopic)}


def added_settings(settings: TopicSettings) -> dict[str, int | float | str | None] | None:
    """What a CreateTopic carries in `settings`: those set that it has no field of its own for."""
    added = {
        k: v for k, v in settings.to_wire().items() if k not in _CREATE_FIELDS and v is not None
    }
    return added or None


@dataclass(frozen=True, slots=True)
class AlterTopicConfig:
    """A topic's settings become these (the fields of `TopicSettings`, None: the node's)."""

    name: str
    settings: dict[str, int | str | None]


@dataclass(frozen=True, slots=True)
class AddPartitions:
    """A topic grows by these partitions (placed like a create's), numbered from `first`:
    applied only while the topic has exactly `first` partitions, so two grows that raced
    from the same count add them once."""

    name: str
    first: int
    replicas: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    name: str


@dataclass(frozen=True, slots=True)
class SetReplicas:
    """A partition's replica set changes (a move): its group's members follow it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TrimPartition:
    """Readers of a partition start at `before` from now on (`topic trim`, Kafka's
    DeleteRecords): its log start rises there, never back; segments wholly before it go."""

    topic: str
    partition: int
    before: int


@dataclass(frozen=True, slots=True)
class NameCluster:
    """The cluster's id, made once by the first controller leader that finds none (a new
    cluster, or one from before ids): the first such command stands (transport/identity.py).
    With the addresses of the members it was named among: their first configuration is
    kept in no log, so a node that replays the log after they left would not know where
    they are, and its mover could not find a departed node still leading a partition it
    must move (seed 40004: `ClusterState.addresses`)."""

    cluster_id: str
    addresses: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class StartRebalance:
    """A rebalance begins (actors/cluster/rebalancer.py): asked for, or a node joined."""

    reason: str


@dataclass(frozen=True, slots=True)
class EndRebalance:
    """The rebalance under way is done, balanced over these brokers (without one under
    way: the brokers a new cluster starts balanced over, what joins are seen against)."""

    brokers: tuple[int, ...]


Command = (
    RegisterBroker
    | CreateTopic
    | DeleteTopic
    | SetReplicas
    | NameCluster
    | AlterTopicConfig
    | AddPartitions
    | TrimPartition
    | StartRebalance
    | EndRebalance
)

_TYPES: dict[str, type] = {cls.__name__: cls for cls in Command.__args__}


def to_wire(command: Command) -> dict[str, Any]:
    """Fields still at their default are left out: a node of an earlier version reads a
    command that uses none of the fields added since."""
    defaults = {f.name: f.default for f in fields(command) if f.default is not MISSING}
    values = asdict(command)
    kept = {k: v for k, v in values.items() if k not in defaults or v != defaults[k]}
    return {"type": type(command).__name__, **kept}


def _check_settings(settings: Any) -> None:
    """An AlterTopicConfig's settings as applying them needs them (every node skips a bad
    one alike, instead of failing on it at every replay)."""
    if not isinstance(settings, dict):
        raise CommandError("bad topic settings: not a map")
    known = {f.name for f in fields(TopicSettings)}
    if not known >= settings.keys():
        raise CommandError(f"bad topic settings: unknown {sorted(settings.keys() - known)}")
    for name, value in settings.items():
        if value is not None and not _SETTING_CHECKS.get(name, _positive_or_unlimited)(value):
            raise CommandError(f"bad topic settings: {name} = {value!r}")


def _positive_or_unlimited(value: Any) -> bool:
    return type(value) is int and (value > 0 or value == UNLIMITED)


def _at_least(least: int) -> Callable[[Any], bool]:
    return lambda value: type(value) is int and value >= least


_SETTING_CHECKS: dict[str, Callable[[Any], bool]] = {
    "timestamp_type": lambda value: value in TIMESTAMP_TYPES,
    "cleanup_policy": lambda value: value in CLEANUP_POLICIES,
    "min_cleanable_dirty_ratio": lambda value: type(value) in (int, float) and 0 <= value <= 1,
    "min_compaction_lag_ms": _at_least(0),
    "delete_retention_ms": _at_least(0),
    "max_compaction_lag_ms": _at_least(1),
    "segment_ms": _at_least(1),
}


def _check_topic_id(topic_id: Any) -> None:
    try:
        uuid.UUID(topic_id)
    except (TypeError, ValueError, AttributeError):
        raise CommandError(f"bad CreateTopic: topic_id {topic_id!r} is not a UUID") from None


def _addresses(pairs: Any) -> tuple[tuple[int, str], ...]:
    try:
        out = tuple((n, a) for n, a in pairs)
    except (TypeError, ValueError):
        raise CommandError("bad NameCluster: addresses are [node id, address] pairs") from None
    if not all(type(n) is int and isinstance(a, str) for n, a in out):
        raise CommandError("bad NameCluster: addresses are [node id, address] pairs")
    return out


def from_wire(wire: Any) -> Command:
    if not isinstance(wire, dict):
        raise CommandError(f"a command is a map, not {type(wire).__name__}")
    cls = _TYPES.get(wire.get("type"))
    if cls is None:
        raise CommandError(f"unknown command type {wire.get('type')!r}")
    names = {f.name for f in fields(cls)}
    args = {k: v for k, v in wire.items() if k != "type"}
    if not names >= args.keys():
        raise CommandError(f"unknown fields {sorted(args.keys() - names)} in {cls.__name__}")
    if "replicas" in args:
        replicas = args["replicas"]
        if cls in (CreateTopic, AddPartitions):
            args["replicas"] = tuple(tuple(r) for r in replicas)
        else:
            args["replicas"] = tuple(replicas)
    if cls is EndRebalance and isinstance(args.get("brokers"), list):
        args["brokers"] = tuple(args["brokers"])
    if cls is AlterTopicConfig or (cls is CreateTopic and args.get("settings") is not None):
        _check_settings(args.get("settings"))
    if cls is NameCluster and "addresses" in args:
        args["addresses"] = _addresses(args["addresses"])
    if cls is CreateTopic and args.get("topic_id") is not None:
        _check_topic_id(args["topic_id"])
    try:
        return cls(**args)
    except TypeError as exc:
        raise CommandError(f"bad {cls.__name__}: {exc}") from None
