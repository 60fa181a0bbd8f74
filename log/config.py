"""A log's settings: the `[log]` table of a node's config file, and a topic's own."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

TIMESTAMP_TYPES = ("create", "log_append")


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes_max: int = 128 * 1024 * 1024
    index_interval_bytes: int = 16 * 1024
    # Retention: None keeps everything. Only committed records are ever dropped; a follower
    # that needs dropped ones starts its log again at the leader's log start.
    retention_bytes: int | None = None
    retention_ms: int | None = None
    # Check every batch of every segment on open (about 1 s per GiB), not only the newest.
    verify_on_open: bool = True
    # Whose clock a record's timestamp is (`default`'s; a topic sets its own): "create",
    # its producer's, or "log_append", its leader's as it appends (actors/replica/stamper.py).
    timestamp_type: str = "create"
    # A new leader whose clock is behind the largest stamp in its log by at most this
    # waits it out before stamping; further behind, it stamps that stamp plus one.
    timestamp_wait_max_ms: int = 1000
    # Only the newest this many bytes of the log stay in the kernel's page cache once
    # durable (more than the log ever holds: the kernel decides). A log is written once and
    # read mostly at its tail: keeping the rest costs fresh memory for every write (eight
    # times the cost of the write itself where a VM's memory is touched for the first time,
    # docs/decisions/storage.md), while a reader that far behind would soon read from the disk.
    page_cache_window_bytes: int = 64 * 1024 * 1024
    # Drop the segments before the last committed snapshot (batch flag SNAPSHOT): for a
    # state machine's log that holds its whole state in each snapshot (`__groups`).
    compact_to_snapshots: bool = False
    # The largest batch an append may carry (Kafka's max.message.bytes); None: only the
    # node's limit on a whole append (`append_bytes_max`) applies.
    max_message_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"timestamp_type is one of {', '.join(TIMESTAMP_TYPES)}")
        if self.page_cache_window_bytes < 0:
            raise ValueError("page_cache_window_bytes is at least 0")


UNLIMITED = -1  # a topic's retention that keeps everything (None: the node's setting)
_RETENTION = ("retention_bytes", "retention_ms")


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """A topic's own settings, kept with each of its replicas (None: the node's setting).
    The controller's log holds them (controller/topic_config.py names them as Kafka does);
    a change reaches every replica as its node applies it."""

    retention_bytes: int | None = None
    retention_ms: int | None = None
    timestamp_type: str | None = None
    segment_bytes_max: int | None = None
    max_message_bytes: int | None = None

    def applied_to(self, config: LogConfig) -> LogConfig:
        """The node's `config` with this topic's settings; a retention of UNLIMITED (-1,
        Kafka's "no limit") is the log's None, whatever the node's own setting."""
        changed = {
            k: None if k in _RETENTION and v == UNLIMITED else v
            for k in self.__slots__
            if (v := getattr(self, k)) is not None
        }
        return replace(config, **changed)

    def to_wire(self) -> dict[str, int | str | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_wire(cls, wire: dict) -> TopicSettings:
        """From a dict of the fields (those missing are None); ValueError for a key that
        is not one (values are checked where they come in: controller/topic_config.py)."""
        known = {f.name for f in fields(cls)}
        if not known >= wire.keys():
            raise ValueError(f"unknown topic settings {sorted(wire.keys() - known)}")
        return cls(**wire)
