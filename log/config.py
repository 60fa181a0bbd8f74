"""A log's settings: the `[log]` table of a node's config file, and a topic's own."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

TIMESTAMP_TYPES = ("create", "log_append")
# Kafka's cleanup.policy: what removes records, retention ("delete"), the cleaner ("compact":
# each key's latest record is kept for ever, log/cleaner.py), or both.
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
DAY_MS = 24 * 3600 * 1000


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
    # Compaction, by Kafka's names (log/cleaner.py): the policy; the share of the log
    # written since the last pass that starts one; how long a record stays whole at
    # least (min_compaction_lag_ms) and at most (max_compaction_lag_ms: a pass then starts
    # whatever the share); how long a tombstone stays once its key's other records are
    # gone; and the age at which a segment is closed even if not full (only closed
    # segments are compacted). Kafka's defaults.
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int | None = None
    delete_retention_ms: int = DAY_MS
    segment_ms: int = 7 * DAY_MS
    # The node's cleaner: the memory of the key map of one pass (Kafka's
    # log.cleaner.dedupe.buffer.size) and the bytes it reads and writes per second (three
    # unthrottled cleaners on two cores doubled appends' p99: docs/compaction.md).
    cleaner_dedupe_buffer_bytes: int = 64 * 1024 * 1024
    cleaner_io_bytes_per_s: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"timestamp_type is one of {', '.join(TIMESTAMP_TYPES)}")
        if self.page_cache_window_bytes < 0:
            raise ValueError("page_cache_window_bytes is at least 0")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ValueError(f"cleanup_policy is one of {', '.join(CLEANUP_POLICIES)}")

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        """Whether retention removes records (a compact-only log keeps every key's latest)."""
        return "delete" in self.cleanup_policy


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
    cleanup_policy: str | None = None
    min_cleanable_dirty_ratio: float | None = None
    min_compaction_lag_ms: int | None = None
    max_compaction_lag_ms: int | None = None
    delete_retention_ms: int | None = None
    segment_ms: int | None = None

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
