"""A topic's configuration as Kafka 4.4's DescribeConfigs reports it: every topic config
Kafka has, each with its type, its source and, when asked, its synonyms and documentation.

Three kinds, so that nothing is claimed that is not done:
- quorumlog's own settings (controller/topic_config.py: retention, segments, largest batch,
  timestamp type, the cleanup policy and compaction's settings): their value in force, alterable, DYNAMIC_TOPIC_CONFIG where the
  topic sets one and DEFAULT_CONFIG (the node's `[log]` setting) otherwise;
- what quorumlog always does, shown as a read-only default with the value it amounts to
  (compression.type=producer, min.insync.replicas = a majority of the replicas, ...);
- what quorumlog does not have (tiered storage, flush intervals, throttles):
  Kafka's default, read-only, its documentation saying it is not applied.
As Kafka, a config's synonyms are the topic's own value (where set), then its broker
setting's, each with its source; the answer's order is by name.
"""

from __future__ import annotations

from typing import NamedTuple

from quorumlog.controller.topic_config import NAMES

DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # Kafka's config sources
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7  # Kafka's config types
LONG_MAX = str(2**63 - 1)
NOT_APPLIED = "Not applied by quorumlog: Kafka's default, shown read-only."


class TopicConfig(NamedTuple):
    name: str
    config_type: int
    synonym: str | None  # its broker setting, as Kafka names it
    value: str  # shown when quorumlog has no setting of that name (see `fixed`)
    doc: str


def _not_applied(name: str, config_type: int, synonym: str | None, default: str) -> TopicConfig:
    return TopicConfig(name, config_type, synonym, default, NOT_APPLIED)


CONFIGS = sorted(
    [
        # quorumlog's settings (value and doc from the topic and controller/topic_config.py)
        TopicConfig("max.message.bytes", INT, "message.max.bytes", "", ""),
        TopicConfig("message.timestamp.type", STRING, "log.message.timestamp.type", "", ""),
        TopicConfig("retention.bytes", LONG, "log.retention.bytes", "", ""),
        TopicConfig("retention.ms", LONG, "log.retention.ms", "", ""),
        TopicConfig("segment.bytes", INT, "log.segment.bytes", "", ""),
        TopicConfig("cleanup.policy", LIST, "log.cleanup.policy", "", ""),
        TopicConfig("delete.retention.ms", LONG, "log.cleaner.delete.retention.ms", "", ""),
        TopicConfig("max.compaction.lag.ms", LONG, "log.cleaner.max.compaction.lag.ms", "", ""),
        TopicConfig("min.cleanable.dirty.ratio", DOUBLE, "log.cleaner.min.cleanable.ratio", "", ""),
        TopicConfig("min.compaction.lag.ms", LONG, "log.cleaner.min.compaction.lag.ms", "", ""),
        TopicConfig("segment.ms", LONG, "log.roll.ms", "", ""),
        # what quorumlog always does
        TopicConfig(
            "compression.type",
            STRING,
            "compression.type",
            "producer",
            "Batches are stored as their producer compressed them.",
        ),
        TopicConfig(
            "unclean.leader.election.enable",
            BOOLEAN,
            "unclean.leader.election.enable",
            "false",
            "Never: Raft elects only a replica whose log holds every committed record.",
        ),
        TopicConfig(
            "min.insync.replicas",
            INT,
            "min.insync.replicas",
            "",  # a majority of the topic's replicas (`fixed`)
            "An append with acks=all waits for a majority of the replicas (Raft's quorum).",
        ),
        TopicConfig(
            "index.interval.bytes",
            INT,
            "log.index.interval.bytes",
            "",  # the node's (`fixed`)
            "Bytes between two offset index entries: the node's [log] index_interval_bytes.",
        ),
        TopicConfig(
            "max.decompressed.message.bytes",
            INT,
            "max.decompressed.message.bytes",
            "",  # what a batch may decompress to (`fixed`)
            "The most a batch's records decompress to, all of them together.",
        ),
        TopicConfig(
            "message.timestamp.after.max.ms",
            LONG,
            "log.message.timestamp.after.max.ms",
            LONG_MAX,
            "No bound: a record's timestamp is not checked against the broker's clock.",
        ),
        TopicConfig(
            "message.timestamp.before.max.ms",
            LONG,
            "log.message.timestamp.before.max.ms",
            LONG_MAX,
            "No bound: a record's timestamp is not checked against the broker's clock.",
        ),
        TopicConfig("remote.storage.enable", BOOLEAN, None, "false", "There is no tiered storage."),
        # what quorumlog does not have
        _not_applied("compression.gzip.level", INT, "compression.gzip.level", "-1"),
        _not_applied("compression.lz4.level", INT, "compression.lz4.level", "9"),
        _not_applied("compression.zstd.level", INT, "compression.zstd.level", "3"),
        _not_applied("errors.deadletterqueue.group.enable", BOOLEAN, None, "false"),
        _not_applied("file.delete.delay.ms", LONG, "log.segment.delete.delay.ms", "60000"),
        _not_applied("flush.messages", LONG, "log.flush.interval.messages", LONG_MAX),
        _not_applied("flush.ms", LONG, None, LONG_MAX),
        _not_applied("follower.replication.throttled.replicas", LIST, None, ""),
        _not_applied("leader.replication.throttled.replicas", LIST, None, ""),
        _not_applied("local.retention.bytes", LONG, "log.local.retention.bytes", "-2"),
        _not_applied("local.retention.ms", LONG, "log.local.retention.ms", "-2"),
        _not_applied("preallocate", BOOLEAN, "log.preallocate", "false"),
        _not_applied("remote.copy.lag.bytes", LONG, "log.remote.copy.lag.bytes", "-1"),
        _not_applied("remote.copy.lag.ms", LONG, "log.remote.copy.lag.ms", "0"),
        _not_applied("remote.log.copy.disable", BOOLEAN, None, "false"),
        _not_applied("remote.log.delete.on.disable", BOOLEAN, None, "false"),
        _not_applied("segment.index.bytes", INT, "log.index.size.max.bytes", "10485760"),
        _not_applied("segment.jitter.ms", LONG, None, "0"),
    ]
)
BY_NAME = {c.name: c for c in CONFIGS}


def described(
    in_force: dict[str, object],
    set_on_topic: set[str],
    node_values: dict[str, object],
    fixed: dict[str, str],
    synonyms: bool,
    documentation: bool,
) -> list[dict]:
    """Every config of a topic (DescribeConfigsResourceResult's fields): `in_force` and
    `set_on_topic` are its own settings' values and the names it sets, `node_values` the
    node's values of them; `fixed` the values of what quorumlog always does that depend
    on the topic or node (min.insync.replicas, ...)."""
    out = []
    for config in CONFIGS:
        own = config.name in NAMES
        value = str(in_force[config.name]) if own else fixed.get(config.name, config.value)
        chain = []
        if config.name in set_on_topic:
            chain.append({"name": config.name, "value": value, "source": DYNAMIC_TOPIC_CONFIG})
        if config.synonym is not None:
            broker = str(node_values[config.name]) if own else value
            chain.append({"name": config.synonym, "value": broker, "source": DEFAULT_CONFIG})
        out.append(
            {
                "name": config.name,
                "value": value,
                "read_only": not own,
                "config_source": chain[0]["source"] if chain else DEFAULT_CONFIG,
                "is_sensitive": False,
                "synonyms": chain if synonyms else [],
                "config_type": config.config_type,
                "documentation": (NAMES[config.name].doc if own else config.doc)
                if documentation
                else None,
            }
        )
    return out
