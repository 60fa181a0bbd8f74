"""Real processes: the Kafka listener answers as Apache Kafka 4.4 does (each answer here was
compared with a 4.4 KRaft broker's, bench/kafka_java.py): Metadata with topic ids that
every node gives alike and keeps across restarts, the cluster id as Kafka writes one,
DescribeCluster, the ACL calls answered SECURITY_DISABLED, OffsetDelete of a classic
group, and a transactional id served by its coordinator alone."""

from __future__ import annotations

import base64
import io
import struct
import time
import uuid
import warnings

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.controller.kafka_ids import kafka_cluster_id
from quorumlog.transport.kafka import make
from tests.process.kafka_support import kafka_cluster
from tests.process.test_kafka import (
    call,
    connect,
    create,
    raw_frame,
    receive_frame,
    serves_metadata,
)
from tests.process.test_kafka_groups import confluent_member
from tests.process.test_topics import wait_until

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaPythonResourceType
    from kafka.errors import KafkaError as KafkaPythonError
    from kafka.errors import SecurityDisabledError
    from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        MetadataRequest,
        MetadataResponse,
    )
    from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

UNKNOWN_TOPIC_ID = 100
INCONSISTENT_GROUP_PROTOCOL = 23
NOT_COORDINATOR = 16
# What a Kafka 4.4 broker without an authorizer answers a client may do.
CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION"}
CLUSTER_OPERATIONS |= {"DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE"}
TOPIC_OPERATIONS |= {"DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-protocol")))


def admin_of(cluster: ProcessCluster, node_id: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.kafka_ports[node_id - 1]}"})


def topic_ids(cluster: ProcessCluster, name: str) -> set[str]:
    """The topic's id as each node's Metadata gives it (librdkafka's DescribeTopics)."""
    found = set()
    for node_id in cluster.ids:
        admin = admin_of(cluster, node_id)  # kept until the answer: a client gone drops it
        described = admin.describe_topics(TopicCollection([name]))
        found.add(str(described[name].result(30).topic_id))
    return found


def metadata_by_id(cluster: ProcessCluster, topic_id: uuid.UUID):
    """kafka-python's Metadata v12 asking for a topic by its id alone."""
    request = MetadataRequest[12](
        topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=topic_id, name=None)],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with connect(cluster) as sock:
        return call(sock, request, MetadataResponse, 12).topics[0]


def test_topics_have_ids_every_node_gives_alike_and_keeps_across_restarts(cluster):
    # librdkafka's admin calls wait for good on a node that names no controller yet (a
    # cluster just started: CreateTopics timed out in CI).
    wait_until(lambda: all(serves_metadata(cluster, i) for i in cluster.ids), 30, "metadata")
    admin = admin_of(cluster, 1)
    create(admin, "identified", partitions=2)
    (text,) = wait_until(lambda: (ids := topic_ids(cluster, "identified")) and ids, 30, "ids")
    topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    assert topic_id.version == 4
    described = admin.describe_topics(
        TopicCollection(["identified"]), include_authorized_operations=True
    )
    operations = described["identified"].result(30).authorized_operations
    assert {op.name for op in operations} == TOPIC_OPERATIONS

    found = metadata_by_id(cluster, topic_id)
    assert (found.error_code, found.name, len(found.partitions)) == (0, "identified", 2)
    unknown = metadata_by_id(cluster, uuid.uuid4())
    assert (unknown.error_code, unknown.name) == (UNKNOWN_TOPIC_ID, None)

    cluster.stop_all()
    cluster.start_all()
    cluster.wait_for_leader()
    # librdkafka's admin calls wait for good on a node that names no controller yet.
    wait_until(lambda: all(serves_metadata(cluster, i) for i in cluster.ids), 30, "metadata")
    assert wait_until(lambda: topic_ids(cluster, "identified") == {text}, 60, "the same id")


def test_the_cluster_id_is_kafkas_form_of_quorumlogs_own(cluster):
    native = wait_until(lambda: (s := cluster.node_status(1)) and s.get("cluster_id"), 30, "id")
    expected = kafka_cluster_id(native)
    assert len(expected) == 22 and len(base64.urlsafe_b64decode(expected + "==")) == 16
    for node_id in cluster.ids:
        admin = admin_of(cluster, node_id)
        assert admin.list_topics(timeout=10).cluster_id == expected
        described = admin.describe_cluster(include_authorized_operations=True).result(30)
        assert described.cluster_id == expected
        assert sorted(n.id for n in described.nodes) == cluster.ids
        assert {(n.host, n.port) for n in described.nodes} == {
            ("127.0.0.1", p) for p in cluster.kafka_ports
        }
        assert described.controller.id in cluster.ids
        assert {op.name for op in described.authorized_operations} == CLUSTER_OPERATIONS
    # kafka-python asks with DescribeCluster too.
    with KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap) as kafka_python:
        described = kafka_python.describe_cluster()
    assert described["cluster_id"] == expected
    assert sorted(b["broker_id"] for b in described["brokers"]) == cluster.ids


def test_acl_calls_say_the_clusters_security_is_its_secret(cluster):
    """As a Kafka broker without an authorizer: SECURITY_DISABLED (librdkafka then lists
    no ACLs, as it does against Kafka), not a missing API."""
    admin = admin_of(cluster, 2)
    any_acl = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(any_acl, request_timeout=10).result(30) == []
    binding = AclBinding(
        ResourceType.TOPIC,
        "t",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for future in (admin.create_acls([binding])[binding], admin.delete_acls([any_acl])[any_acl]):
        with pytest.raises(KafkaException) as refused:
            future.result(30)
        error = refused.value.args[0]
        assert error.code() == KafkaError.SECURITY_DISABLED
        assert "the cluster's security is its secret" in error.str()
    pattern = ResourcePatternFilter(KafkaPythonResourceType.ANY, None, ACLResourcePatternType.ANY)
    acl_filter = ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, pattern)
    with (
        KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap) as kafka_python,
        pytest.raises(SecurityDisabledError, match="security is its secret"),
    ):
        kafka_python.describe_acls(acl_filter)


def test_a_transactional_id_is_served_by_its_coordinator_alone(cluster):
    """InitProducerId with a transactional id: NOT_COORDINATOR from every node but its
    coordinator (the client finds it again), which answers the id's producer; a second
    session takes the next epoch; one naming a producer that is not the current one is
    fenced (KIP-360)."""

    def init(node_id: int):
        request = InitProducerIdRequest[1](transactional_id="tx", transaction_timeout_ms=60_000)
        with connect(cluster, node_id=node_id) as sock:
            return call(sock, request, InitProducerIdResponse, 1)

    def coordinator() -> int | None:
        served = [n for n in cluster.ids if init(n).error_code == 0]
        return served[0] if len(served) == 1 else None

    node = wait_until(coordinator, 30, "the coordinator of 'tx'")
    first, second = init(node), init(node)
    assert first.producer_id == second.producer_id >= 0
    assert second.producer_epoch == first.producer_epoch + 1
    assert all(init(n).error_code == NOT_COORDINATOR for n in cluster.ids if n != node)


def test_offset_delete_is_refused_for_a_topic_an_active_member_subscribes_to(cluster):
    admin = admin_of(cluster, 1)
    create(admin, "followed", partitions=1)
    create(admin, "left", partitions=1)
    with cluster.client(timeout=30) as c:
        for topic in ("followed", "left"):
            c.append([b"one", b"two"], topic=topic, partition=0)
    member = confluent_member(cluster, "pruned")
    try:
        member.subscribe(["followed"])
        wait_until(lambda: member.poll(1.0), 30, "a record")
        member.commit(asynchronous=False)
        member.commit(offsets=[TopicPartition("left", 0, 2)], asynchronous=False)
        assert deleted(cluster, "pruned", "followed") == "GroupSubscribedToTopicError"
        assert deleted(cluster, "pruned", "left") == "NoError"
        assert committed(admin, "pruned") == {"followed": 1}
    finally:
        member.close()
    assert deleted(cluster, "pruned", "followed") == "NoError"
    assert committed(admin, "pruned") == {}
    assert deleted(cluster, "pruned", "nowhere") == "UnknownTopicOrPartitionError"
    # A group never seen: its coordinator may still be moving in a young cluster.
    answered = wait_until(lambda: coordinated(deleted(cluster, "nobody", "left")), 30, "answer")
    assert answered == "GroupIdNotFoundError"


def coordinated(error: str) -> str | None:
    """The answer, unless it says the group's coordinator is not (yet) there."""
    return None if error in ("CoordinatorNotAvailableError", "NotCoordinatorError") else error


def deleted(cluster: ProcessCluster, group: str, topic: str) -> str:
    """kafka-python's OffsetDelete of the topic's partition 0: the error's name."""
    with KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap) as kafka_python:
        try:
            (error,) = kafka_python.delete_group_offsets(
                group, [KafkaTopicPartition(topic, 0)]
            ).values()
        except KafkaPythonError as exc:
            return type(exc).__name__
    return error.__name__


def committed(admin: AdminClient, group: str) -> dict[str, int]:
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    return {
        tp.topic: tp.offset for tp in listed[group].result(30).topic_partitions if tp.offset >= 0
    }


def test_a_join_with_nothing_to_agree_on_is_refused_and_the_node_stays_up(cluster):
    """A JoinGroup with no protocol, or no protocol type, is answered as Kafka answers it
    (it stopped the node: the group's rebalance found no protocol to choose)."""
    range_protocol = JoinGroupRequest[5].JoinGroupRequestProtocol(name="range", metadata=b"")
    for protocol_type, protocols in (("consumer", []), ("", [range_protocol])):
        request = JoinGroupRequest[5](
            group_id="empty-handed",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            group_instance_id=None,
            protocol_type=protocol_type,
            protocols=protocols,
        )

        def answers(request=request) -> set[int] | None:
            """Every node's answer, once one is the coordinator's (it may still be moving
            in a young cluster): the others say they are not."""
            found = set()
            for node_id in cluster.ids:
                with connect(cluster, node_id) as sock:
                    found.add(call(sock, request, JoinGroupResponse, 5).error_code)
            return found if found != {NOT_COORDINATOR} else None

        assert wait_until(answers, 30, "the coordinator's answer") == {
            INCONSISTENT_GROUP_PROTOCOL,
            NOT_COORDINATOR,
        }
    time.sleep(1.0)  # past the rebalance that crashed
    assert all(proc.poll() is None for proc in cluster.procs.values())


# Kafka 4.4's ranges of the APIs quorumlog serves (a KRaft broker's ApiVersions v4).
KAFKA_44_VERSIONS = {
    0: (0, 13),
    1: (4, 18),
    2: (1, 11),
    3: (0, 13),
    8: (2, 10),
    9: (1, 10),
    10: (0, 6),
    11: (0, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 6),
    16: (0, 5),
    17: (0, 1),
    18: (0, 5),
    19: (2, 7),
    20: (1, 6),
    21: (0, 2),
    22: (0, 5),
    23: (2, 4),
    24: (0, 5),
    25: (0, 4),
    26: (0, 5),
    28: (0, 6),
    29: (1, 3),
    30: (1, 3),
    31: (1, 3),
    32: (1, 4),
    33: (0, 2),
    36: (0, 2),
    37: (0, 3),
    42: (0, 3),
    44: (0, 1),
    45: (0, 1),
    46: (0, 0),
    47: (0, 0),
    60: (0, 2),
    68: (0, 1),
    69: (0, 1),
}
UNSUPPORTED_VERSION = 35


def test_api_versions_lists_exactly_what_is_served(cluster):
    """Every version ApiVersions lists is answered, in that version, to a request with every
    field at its zero value; a version just outside a range, or an API not listed, is
    answered (UNSUPPORTED_VERSION, where the answer's type has a place for it: see
    test_kafka_codec) on a connection that stays up; no range goes past Kafka 4.4's."""
    request = ApiVersionsRequest[4](client_software_name="tests", client_software_version="1")
    with connect(cluster) as sock:
        listed = call(sock, request, ApiVersionsResponse, 1).api_keys
    served = {k.api_key: (k.min_version, k.max_version) for k in listed}
    assert served.keys() == KAFKA_44_VERSIONS.keys()
    for key, (low, high) in served.items():
        kafka_low, kafka_high = KAFKA_44_VERSIONS[key]
        assert kafka_low <= low <= high <= kafka_high, key
    with connect(cluster) as sock:
        for key, (low, high) in served.items():
            for version in range(low, high + 1):
                answer = ask(sock, key, version)
                assert getattr(answer, "error_code", 0) != UNSUPPORTED_VERSION, (key, version)
            for version in (low - 1, high + 1):
                if version >= 0:
                    sock.sendall(raw_frame(key, version, 11))
                    assert struct.unpack_from(">i", receive_frame(sock), 4) == (11,)
        for key in sorted(set(range(100)) - served.keys()):
            sock.sendall(raw_frame(key, 0, 12))
            assert struct.unpack_from(">i", receive_frame(sock), 4) == (12,)
        assert call(sock, request, ApiVersionsResponse, 13).error_code == 0
    assert all(proc.poll() is None for proc in cluster.procs.values())


def ask(sock, key: int, version: int):
    """A request of every field at its zero value (acks=1 for a Produce, which acks=0 would
    leave unanswered), and its answer, read with kio at that version."""
    schema = load_request_schema(key, version)
    out = io.BytesIO()
    header = {"request_api_key": key, "request_api_version": version, "correlation_id": 9}
    entity_writer(schema.__header_schema__)(out, make(schema.__header_schema__, header))
    entity_writer(schema)(out, make(schema, {"acks": 1} if key == 0 else {}))
    sock.sendall(struct.pack(">i", out.tell()) + out.getvalue())
    frame = receive_frame(sock)[4:]
    response = load_response_schema(key, version)
    header_read, size = entity_reader(response.__header_schema__)(frame, 0)
    assert header_read.correlation_id == 9
    return entity_reader(response)(frame, size)[0]
