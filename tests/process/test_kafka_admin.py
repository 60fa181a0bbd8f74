"""Real processes: kafka-python's admin client runs an operator's calls against the Kafka
listener: topic configuration (described, altered whole and incrementally), more
partitions, partition reassignments, and deleting consumer groups. Each change is the
native one: `Client.describe_topic` sees what Kafka changed."""

from __future__ import annotations

import subprocess
import warnings

import pytest

from quorumlog import Client
from quorumlog.bench.partitions import groups_settled
from quorumlog.cli.localcluster import QUORUMLOG
from tests.process.kafka_support import kafka_cluster
from tests.process.test_kafka import call, connect
from tests.process.test_topics import wait_until

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.admin._partitions import NewPartitions
    from kafka.admin._topics import NewTopic
    from kafka.errors import InvalidPartitionsError
    from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse
    from kafka.protocol.consumer.offsets import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
    )


NOT_LEADER_OR_FOLLOWER = 6
INVALID_CONFIG = 40
TOPIC_ALREADY_EXISTS = 36


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-admin")))


@pytest.fixture
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def topic_config(admin: KafkaAdminClient, name: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResourceType.TOPIC, name)
    found = admin.describe_configs([resource], config_filter="all")
    entries = found.get("topic", {}).get(name)
    assert entries is not None, found
    return {k: (v["value"] if isinstance(v, dict) else v) for k, v in entries.items()}


def test_topic_configuration_through_kafka_is_the_native_one(cluster, admin):
    admin.create_topics([NewTopic("conf", num_partitions=2, replication_factor=3)])
    wait_until(lambda: "conf" in Client(cluster.brokers).topics(), 20, "created")
    config = topic_config(admin, "conf")
    assert config["retention.ms"] == "-1"
    assert config["message.timestamp.type"] == "CreateTime"
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "conf", configs={"retention.ms": "3600000"})],
        incremental=True,
    )
    assert topic_config(admin, "conf")["retention.ms"] == "3600000"
    with Client(cluster.brokers) as c:
        assert c.describe_topic("conf")[0]["config"]["retention.ms"] == 3600000
        c.alter_topic("conf", config={"retention.bytes": 1 << 30})
    assert topic_config(admin, "conf")["retention.bytes"] == str(1 << 30)
    # DELETE goes back to the node's setting.
    admin.alter_configs(
        [
            ConfigResource(
                ConfigResourceType.TOPIC,
                "conf",
                configs={"retention.ms": (AlterConfigOp.DELETE, None)},
            )
        ],
        incremental=True,
    )
    assert topic_config(admin, "conf")["retention.ms"] == "-1"
    bad = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "conf", configs={"segment.bytes": "12"})],
        incremental=True,
        raise_on_unknown=False,
    )
    assert "InvalidConfigurationError: segment.bytes is at least" in bad["topic"]["conf"], bad
    # The brokers' own settings are shown, read-only.
    broker = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
    )
    assert broker["broker"]["1"]["broker.id"]["value"] == "1", broker
    assert broker["broker"]["1"]["log.segment.bytes"]["read_only"] is True


def test_create_partitions_through_kafka_grows_the_topic(cluster, admin):
    admin.create_topics([NewTopic("wide", num_partitions=2, replication_factor=3)])
    wait_until(lambda: "wide" in Client(cluster.brokers).topics(), 20, "created")
    admin.create_partitions({"wide": NewPartitions(total_count=4)})
    with Client(cluster.brokers) as c:
        assert c.topics()["wide"] == 4
        assert all(r["leader_id"] is not None for r in c.describe_topic("wide"))
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"wide": NewPartitions(total_count=3)})


def test_reassignments_through_kafka_move_a_partition(cluster, admin):
    with Client(cluster.brokers, timeout=30) as c:
        c.create_topic("moved", partitions=1, replicas=3)
        c.append([b"kept"], topic="moved", partition=0)
        admin.alter_partition_reassignments({TopicPartition("moved", 0): [2, 3]})
        assert c.describe_topic("moved")[0]["replicas"] == [2, 3]
        wait_until(lambda: groups_settled(cluster, "moved", {0: [2, 3]}), 60, "on 2 and 3")
        wait_until(lambda: not admin.list_partition_reassignments(), 30, "listed as done")
        assert [r.value for r in c.read(0, 10, topic="moved", partition=0)] == [b"kept"]


def test_delete_groups_through_kafka(cluster, admin):
    with Client(cluster.brokers, timeout=30) as c:
        c.create_topic("eaten", partitions=1, replicas=3)
        c.append([b"one"], topic="eaten", partition=0)
    consumer = KafkaConsumer(
        "eaten",
        bootstrap_servers=cluster.kafka_bootstrap,
        group_id="eaters",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        while not consumer.poll(timeout_ms=1000):
            pass
        consumer.commit()
        assert _delete(admin, "eaters") == "NonEmptyGroupError"
        native = subprocess.run(
            [*QUORUMLOG, "group", "-b", cluster.brokers, "delete", "eaters"], capture_output=True
        )
        assert native.returncode == 1 and b"active Kafka member" in native.stderr
    finally:
        consumer.close()
    assert _delete(admin, "eaters") == "OK"
    assert _delete(admin, "eaters") == "GroupIdNotFoundError"
    with Client(cluster.brokers) as c:
        assert all(g["group"] != "eaters" for g in c.groups())


def _delete(admin: KafkaAdminClient, group: str) -> str:
    """kafka-python's answer for the group: "OK" or the error's name."""
    return dict(admin.delete_groups([group]))[group]


def test_offset_for_leader_epoch_says_where_each_term_ended(cluster):
    """KIP-101's question, asked as a Kafka consumer does after a leader change: the end of
    the current term is the committed end; an older term ends where the next began."""
    with Client(cluster.brokers, timeout=30) as c:
        c.create_topic("epochs", partitions=1, replicas=3)
        c.append([b"a", b"b"], topic="epochs", partition=0)
        row = c.describe_topic("epochs")[0]
        end = c.end_offset(topic="epochs", partition=0)
    leader, term = row["leader_id"], row["term"]
    now = ask_epoch(cluster, leader, term)
    assert (now.error_code, now.leader_epoch, now.end_offset) == (0, term, end + 1)
    assert ask_epoch(cluster, leader, 0).leader_epoch == -1, "no record is of term 0"
    cluster.kill(leader)
    try:
        with Client(cluster.brokers, timeout=30) as c:
            c.append([b"c"], topic="epochs", partition=0)  # under a new leader, a new term
            row = c.describe_topic("epochs")[0]
        assert row["term"] > term
        then = ask_epoch(cluster, row["leader_id"], term)
        assert (then.error_code, then.leader_epoch, then.end_offset) == (0, term, end + 1)
        other = next(n for n in cluster.procs if n != row["leader_id"])
        assert ask_epoch(cluster, other, term).error_code == NOT_LEADER_OR_FOLLOWER
    finally:
        cluster.start(leader)


def ask_epoch(cluster, node_id: int, epoch: int):
    topic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    partition = topic.OffsetForLeaderPartition(
        partition=0, current_leader_epoch=-1, leader_epoch=epoch
    )
    request = OffsetForLeaderEpochRequest[3](
        replica_id=-1, topics=[topic(topic="epochs", partitions=[partition])]
    )
    with connect(cluster, node_id) as sock:
        return call(sock, request, OffsetForLeaderEpochResponse, 7).topics[0].partitions[0]


def test_delete_records_through_kafka_moves_the_log_start(cluster, admin):
    with Client(cluster.brokers, timeout=30) as c:
        c.create_topic("deleted", partitions=1, replicas=3)
        first = c.append([b"%d" % i for i in range(10)], topic="deleted", partition=0)
        result = admin.delete_records({TopicPartition("deleted", 0): first + 4})
        (meta,) = result.values()
        assert meta["low_watermark"] == first + 4, result
        assert c.start_offset(topic="deleted", partition=0) == first + 4
        assert [r.value for r in c.read(first + 4, 100, topic="deleted")] == [
            b"%d" % i for i in range(4, 10)
        ]


def test_a_topic_created_through_kafka_keeps_the_settings_it_was_given(cluster, admin):
    admin.create_topics(
        [
            NewTopic(
                "configured",
                num_partitions=1,
                replication_factor=3,
                topic_configs={
                    "retention.ms": "7200000",
                    "message.timestamp.type": "LogAppendTime",
                    "cleanup.policy": "delete",  # what frameworks send: accepted
                    "min.insync.replicas": "2",
                },
            )
        ]
    )
    config = topic_config(admin, "configured")
    assert config["retention.ms"] == "7200000"
    assert config["message.timestamp.type"] == "LogAppendTime"
    result = admin.create_topics(
        [NewTopic("misconfigured", 1, 3, topic_configs={"retention.nope": "1"})],
        raise_errors=False,
    )
    (answer,) = result["topics"] if isinstance(result, dict) else result.topics
    assert answer["error_code"] == INVALID_CONFIG, result
    assert "no topic setting 'retention.nope'" in answer["error_message"]
    compacted = admin.create_topics(
        [NewTopic("compacted", 1, 3, topic_configs={"cleanup.policy": "compact"})],
        raise_errors=False,
    )
    (answer,) = compacted["topics"] if isinstance(compacted, dict) else compacted.topics
    assert answer["error_code"] == 0, compacted
    assert topic_config(admin, "compacted")["cleanup.policy"] == "compact"
    tidy = admin.create_topics(
        [NewTopic("tidy", 1, 3, topic_configs={"cleanup.policy": "tidy"})], raise_errors=False
    )
    (answer,) = tidy["topics"] if isinstance(tidy, dict) else tidy.topics
    assert answer["error_code"] == INVALID_CONFIG and "delete, compact" in answer["error_message"]


def test_creating_a_topic_that_exists_is_answered_so_before_its_configs_are_checked(admin):
    """As Kafka 4.4 answers (compared with a KRaft broker): TOPIC_ALREADY_EXISTS and its
    words, whatever the configs say."""
    admin.create_topics([NewTopic("twice", 1, 3)])
    for configs in ({}, {"retention.nope": "1"}, {"cleanup.policy": "compact"}):
        result = admin.create_topics(
            [NewTopic("twice", 1, 3, topic_configs=configs)], raise_errors=False
        )
        (answer,) = result["topics"] if isinstance(result, dict) else result.topics
        assert answer["error_code"] == TOPIC_ALREADY_EXISTS, (configs, result)
        assert answer["error_message"] == "Topic 'twice' already exists."


# Every topic config Kafka 4.4 reports (a KRaft broker's DescribeConfigs of a topic).
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "delete.retention.ms",
    "errors.deadletterqueue.group.enable",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.decompressed.message.bytes",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.copy.lag.bytes",
    "remote.copy.lag.ms",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
}


def test_describe_configs_reports_every_topic_config_kafka_has(cluster, admin):
    """Each with its source, read-only flag, type and synonyms: quorumlog's own settings as
    the topic or node has them, what it always does as read-only defaults, what it does
    not have as Kafka's defaults, read-only, saying so."""
    admin.create_topics([NewTopic("described", 1, 3, topic_configs={"retention.ms": "3600000"})])
    resource = ConfigResource(ConfigResourceType.TOPIC, "described")
    found = admin.describe_configs([resource], include_synonyms=True, config_filter="all")
    configs = found["topic"]["described"]
    assert set(configs) == KAFKA_TOPIC_CONFIGS

    def entry(name: str) -> tuple:
        c = configs[name]
        synonyms = [(s["name"], s["value"], s["source"]) for s in c["synonyms"]]
        return c["value"], c["read_only"], c["config_source"], c["config_type"], synonyms

    assert entry("retention.ms") == (
        "3600000",
        False,
        "DYNAMIC_TOPIC_CONFIG",
        "LONG",
        [
            ("retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"),
            ("log.retention.ms", "-1", "DEFAULT_CONFIG"),
        ],
    )
    segment = str(128 * 1024 * 1024)  # the node's, as no [log] table says otherwise
    assert entry("segment.bytes") == (
        segment,
        False,
        "DEFAULT_CONFIG",
        "INT",
        [("log.segment.bytes", segment, "DEFAULT_CONFIG")],
    )
    assert entry("cleanup.policy") == (
        "delete",
        False,
        "DEFAULT_CONFIG",
        "LIST",
        [("log.cleanup.policy", "delete", "DEFAULT_CONFIG")],
    )
    assert entry("min.insync.replicas")[:3] == ("2", True, "DEFAULT_CONFIG")  # of 3 replicas
    assert entry("compression.type")[:2] == ("producer", True)
    assert entry("unclean.leader.election.enable")[:4] == (
        "false",
        True,
        "DEFAULT_CONFIG",
        "BOOLEAN",
    )
    assert entry("min.cleanable.dirty.ratio")[:4] == ("0.5", False, "DEFAULT_CONFIG", "DOUBLE")
    assert entry("flush.ms") == (str(2**63 - 1), True, "DEFAULT_CONFIG", "LONG", [])
    assert not any(c["is_sensitive"] for c in configs.values())

    # Documentation when asked (v3 on); the configs named, or all when none is.
    request = DescribeConfigsRequest[4](
        resources=[
            DescribeConfigsRequest[4].DescribeConfigsResource(
                resource_type=2, resource_name="described", configuration_keys=["flush.ms"]
            )
        ],
        include_synonyms=False,
        include_documentation=True,
    )
    with connect(cluster) as sock:
        (result,) = call(sock, request, DescribeConfigsResponse, 3).results
    (flush,) = result.configs
    assert "Not applied by quorumlog" in flush.documentation
