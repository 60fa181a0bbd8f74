"""A topic's configuration by Kafka's names: what `topic describe` shows, `topic alter --set`
and Kafka's config calls change, and how each name maps to a field of `TopicSettings`.

Values come in as text (`retention.ms=86400000`, Kafka's config calls) or as numbers; each
is checked here, once, before the controller's leader appends the change, so that applying
it (controller/state.py) cannot fail. "-1" means no limit for the retention names, as in
Kafka. A name left unset shows the node's own setting (its `[log]` table, or the built-in
default), which is also what removing it (`--set NAME=` with no value, Kafka's DELETE)
goes back to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from quorumlog.controller.state import TopicError
from quorumlog.log.batch import PAYLOAD_BYTES_MAX
from quorumlog.log.config import TIMESTAMP_TYPES, UNLIMITED, LogConfig, TopicSettings

SEGMENT_BYTES_MIN = 64 * 1024  # smaller would mean a file per few appends

# Kafka's names for the timestamp types (log/config.py's TIMESTAMP_TYPES).
KAFKA_TIMESTAMP_TYPES = {"create": "CreateTime", "log_append": "LogAppendTime"}


class ConfigError(TopicError):
    """A name or value that no topic can have (one line, for the user)."""


@dataclass(frozen=True, slots=True)
class ConfigName:
    kafka: str
    field: str  # of TopicSettings
    doc: str


NAMES = {
    c.kafka: c
    for c in (
        ConfigName("retention.ms", "retention_ms", "age of the records kept (-1: forever)"),
        ConfigName("retention.bytes", "retention_bytes", "bytes kept per partition (-1: all)"),
        ConfigName(
            "message.timestamp.type",
            "timestamp_type",
            "whose clock stamps records: CreateTime (the producer's) or LogAppendTime",
        ),
        ConfigName("segment.bytes", "segment_bytes_max", "size of one segment file"),
        ConfigName("max.message.bytes", "max_message_bytes", "largest batch an append carries"),
        ConfigName(
            "cleanup.policy",
            "cleanup_policy",
            "delete (retention removes records), compact (each key's latest is kept) or both",
        ),
        ConfigName(
            "min.cleanable.dirty.ratio",
            "min_cleanable_dirty_ratio",
            "share of a compacted log written since its last cleaning that starts the next",
        ),
        ConfigName(
            "min.compaction.lag.ms", "min_compaction_lag_ms", "age before a record may be compacted"
        ),
        ConfigName(
            "max.compaction.lag.ms",
            "max_compaction_lag_ms",
            "age at which a record is compacted whatever the dirty ratio",
        ),
        ConfigName("delete.retention.ms", "delete_retention_ms", "how long a tombstone is kept"),
        ConfigName("segment.ms", "segment_ms", "age at which a segment is closed"),
    )
}
# Kafka's "never" for max.compaction.lag.ms (Long.MAX_VALUE), the log's None.
LONG_MAX = (1 << 63) - 1


# Kafka topic settings that tools and frameworks send with every create (or alter) and
# that mean nothing here, or only what quorumlog always does: accepted through the Kafka
# listener and ignored, as long as they ask for nothing it cannot do.
KAFKA_IGNORED = frozenset(
    {
        "min.insync.replicas",  # every append with acks=all waits for a majority
        "unclean.leader.election.enable",  # never: Raft elects only a complete log
        "compression.type",
        "flush.messages",
        "flush.ms",
        "index.interval.bytes",
        "segment.jitter.ms",
        "segment.index.bytes",
        "preallocate",
        "file.delete.delay.ms",
        "message.downconversion.enable",
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "local.retention.ms",
        "local.retention.bytes",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)


def kafka_settings(configs: Mapping[str, object]) -> dict[str, object]:
    """The settings a Kafka client gave that mean something here: those of `NAMES`, with
    `KAFKA_IGNORED` left out. Unknown names are kept, for `changed_settings` to refuse as
    Kafka would."""
    return {name: value for name, value in configs.items() if name not in KAFKA_IGNORED}


def parse_assignments(assignments: list[str]) -> dict[str, str | None]:
    """`NAME=VALUE` strings (the command line's `--set`) as a map; `NAME=` unsets NAME."""
    out: dict[str, str | None] = {}
    for item in assignments:
        name, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"--set takes NAME=VALUE, not {item!r}")
        out[name.strip()] = value.strip() or None
    return out


def changed_settings(
    settings: TopicSettings, changes: Mapping[str, object], replace_all: bool = False
) -> TopicSettings:
    """`settings` with `changes` (Kafka names -> value, None to unset) applied; with
    `replace_all` (Kafka's AlterConfigs), every name not in `changes` is unset."""
    fields = {} if replace_all else settings.to_wire()
    for name, value in changes.items():
        known = NAMES.get(name)
        if known is None:
            raise ConfigError(f"no topic setting {name!r}; a topic has {', '.join(sorted(NAMES))}")
        fields[known.field] = None if value is None else _checked(name, value)
    return TopicSettings.from_wire(fields)


def described(settings: TopicSettings, node_config: LogConfig, append_bytes_max: int) -> dict:
    """Every name with the value in force: the topic's own, else the node's setting."""
    config = settings.applied_to(node_config)
    max_message = config.max_message_bytes
    return {
        "retention.ms": -1 if config.retention_ms is None else config.retention_ms,
        "retention.bytes": -1 if config.retention_bytes is None else config.retention_bytes,
        "message.timestamp.type": KAFKA_TIMESTAMP_TYPES[config.timestamp_type],
        "segment.bytes": config.segment_bytes_max,
        "max.message.bytes": append_bytes_max if max_message is None else max_message,
        "cleanup.policy": config.cleanup_policy,
        "min.cleanable.dirty.ratio": config.min_cleanable_dirty_ratio,
        "min.compaction.lag.ms": config.min_compaction_lag_ms,
        "max.compaction.lag.ms": (
            LONG_MAX if config.max_compaction_lag_ms is None else config.max_compaction_lag_ms
        ),
        "delete.retention.ms": config.delete_retention_ms,
        "segment.ms": config.segment_ms,
    }


def set_here(settings: TopicSettings) -> set[str]:
    """The names the topic sets itself (the others show the node's settings)."""
    return {c.kafka for c in NAMES.values() if getattr(settings, c.field) is not None}


def _checked(name: str, value: object) -> int | float | str | None:
    """The native value of `name` for `value` (text or number); None for "no limit"."""
    if name == "cleanup.policy":
        policies = sorted({p.strip() for p in str(value).split(",")})
        if not policies or not set(policies) <= {"compact", "delete"}:
            raise ConfigError(f"{name} is delete, compact or compact,delete, not {value!r}")
        return ",".join(policies)
    if name == "min.cleanable.dirty.ratio":
        try:
            ratio = float(str(value))
        except ValueError:
            ratio = -1.0
        if not 0 <= ratio <= 1:
            raise ConfigError(f"{name} is a number from 0 to 1, not {value!r}")
        return ratio
    if name == "message.timestamp.type":
        native = {v: k for k, v in KAFKA_TIMESTAMP_TYPES.items()}.get(str(value))
        if native is None and value in TIMESTAMP_TYPES:
            native = str(value)
        if native is None:
            raise ConfigError(f"{name} is CreateTime or LogAppendTime, not {value!r}")
        return native
    number = _integer(name, value)
    if name in ("retention.ms", "retention.bytes"):
        if number == UNLIMITED:
            return UNLIMITED  # kept as the topic's own: the node's limit does not apply
        if number < 1:
            raise ConfigError(f"{name} is -1 (no limit) or a positive integer, not {value!r}")
    elif name == "segment.bytes":
        if number < SEGMENT_BYTES_MIN:
            raise ConfigError(f"{name} is at least {SEGMENT_BYTES_MIN}, not {value!r}")
    elif name in ("min.compaction.lag.ms", "delete.retention.ms"):
        if number < 0:
            raise ConfigError(f"{name} is at least 0, not {value!r}")
    elif name in ("max.compaction.lag.ms", "segment.ms"):
        if number < 1:
            raise ConfigError(f"{name} is at least 1, not {value!r}")
        if number == LONG_MAX and name == "max.compaction.lag.ms":
            return None  # Kafka's default: never forced
    elif not 1 <= number <= PAYLOAD_BYTES_MAX:  # max.message.bytes
        raise ConfigError(f"{name} is 1-{PAYLOAD_BYTES_MAX}, not {value!r}")
    return number


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name} is an integer, not {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name} is an integer, not {value!r}") from None
