"""Real processes: Kafka clients (kafka-python, confluent-kafka, aiokafka) against the Kafka
listener (`serve --kafka-listen`). What a Kafka producer writes, native readers read, and
the other way round; topics come and go through Kafka's admin calls; bad bytes close their
own connection only. One 3-node cluster serves the whole module."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import time
import warnings

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from crc32c import crc32c

from quorumlog import Record
from quorumlog.cli.localcluster import ProcessCluster
from tests.process.kafka_support import kafka_cluster
from tests.process.test_topics import wait_until

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition
    from kafka import KafkaProducer
    from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        MetadataRequest,
        MetadataResponse,
    )
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
    from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
    from kafka.record.default_records import DefaultRecordBatchBuilder

CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_VERSION = 35
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Until every node serves Metadata whole, one lists only itself, and librdkafka's
    # AdminClient, finding no controller, waits for one without asking again.
    root = str(tmp_path_factory.mktemp("kafka"))
    yield from kafka_cluster(root, ready=serves_metadata)


@pytest.fixture(scope="module")
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})


def serves_metadata(cluster: ProcessCluster, node_id: int) -> bool:
    """Whether the node's Metadata names every broker and a controller (a listener that
    has not yet learnt every broker's Kafka address waits up to a second, then names those
    it knows: actors/kafka/cluster.py, KafkaBrokers)."""
    try:
        with connect(cluster, node_id, timeout=2) as sock:
            sock.sendall(request_bytes(MetadataRequest[1](topics=[]), 1))
            response = MetadataResponse.decode(
                receive_frame(sock), version=1, header=True, framed=True
            )
    except (OSError, AssertionError):
        return False
    return (
        sorted(b.node_id for b in response.brokers) == cluster.ids
        and response.controller_id in cluster.ids
    )


def create(admin: AdminClient, name: str, partitions: int) -> None:
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=3)])
    assert futures[name].result(timeout=30) is None


def producer(cluster: ProcessCluster) -> KafkaProducer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return KafkaProducer(
            bootstrap_servers=cluster.kafka_bootstrap,
            acks="all",
            enable_idempotence=True,
            request_timeout_ms=15_000,
            max_block_ms=30_000,
        )


def native_headers(record: Record) -> list[tuple[str, bytes]]:
    return [tuple(h) for h in record.headers or []]


def read_natively(cluster: ProcessCluster, topic: str, partition: int, count: int) -> list:
    """`count` records of a partition from its start, read by the native Client (which
    reads from any replica, up to the commit offset that replica knows: a follower may
    not have heard of the newest commit yet)."""
    out: list[Record] = []
    deadline = time.monotonic() + 20
    with cluster.client(timeout=20) as client:
        while True:
            position = out[-1].offset + 1 if out else 0
            out += client.read(position, topic=topic, partition=partition, max_records=count)
            if len(out) >= count:
                return out
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}/{partition}: {len(out)} of {count} records")
            time.sleep(0.05)


# ----------------------------------------------------------------- raw connections


def connect(cluster: ProcessCluster, node_id: int = 1, timeout: float = 15) -> socket.socket:
    address = ("127.0.0.1", cluster.kafka_ports[node_id - 1])
    sock = socket.create_connection(address, timeout=timeout)
    sock.settimeout(timeout)
    return sock


def receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"connection closed after {len(data)} of {size} bytes"
        data += chunk
    return data


def receive_frame(sock: socket.socket) -> bytes:
    """One response, size prefix included."""
    size = receive_exactly(sock, 4)
    return size + receive_exactly(sock, struct.unpack(">i", size)[0])


def request_bytes(message, correlation_id: int) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id="raw-test")
    return bytes(message.encode(header=True, framed=True))


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request header v1 (client id "raw") and `body`, size-prefixed."""
    frame = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"raw" + body
    return struct.pack(">i", len(frame)) + frame


def call(sock: socket.socket, message, response_type, correlation_id: int):
    """Send a kafka-python request and decode its response (same version)."""
    sock.sendall(request_bytes(message, correlation_id))
    version = message.API_VERSION
    response = response_type.decode(receive_frame(sock), version=version, header=True, framed=True)
    assert response.header.correlation_id == correlation_id
    return response


def kafka_batch(records: list[tuple], producer_id=-1, epoch=-1, sequence=-1) -> bytes:
    """A record batch built by kafka-python, of `(key, value, timestamp_ms)` records."""
    builder = DefaultRecordBatchBuilder(2, 0, False, producer_id, epoch, sequence, 1 << 20)
    for i, (key, value, ts) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=[])
    return bytes(builder.build())


def produce(sock: socket.socket, topic: str, partition: int, batch: bytes, correlation_id: int):
    """(error code, base offset) of a Produce v7 of one batch, acks=all."""
    request = ProduceRequest[7](
        transactional_id=None,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=partition, records=batch
                    )
                ],
            )
        ],
    )
    response = call(sock, request, ProduceResponse, correlation_id)
    [topic_response] = response.responses
    [answer] = topic_response.partition_responses
    return answer.error_code, answer.base_offset


def assert_closed_by_peer(sock: socket.socket) -> None:
    """The other side closes the connection (within the socket's timeout), answering
    nothing before it does."""
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    assert data == b"", f"an answer to garbage: {data[:40]!r}"


# ----------------------------------------------------------------------- the tests


def test_kafka_producer_writes_what_native_readers_read_back(cluster, admin):
    create(admin, "orders", partitions=3)
    sent = []
    p = producer(cluster)
    try:
        futures = []
        for i in range(60):
            key, value = b"customer-%d" % (i % 7), b"order %d " % i + os.urandom(i)
            if i % 10 == 9:
                value = None  # a tombstone: Kafka's null value reads back as None
            headers = [("trace", b"t-%d" % i), ("empty", b"")] if i % 3 else []
            ts = BASE_TS + i
            sent.append((key, value, headers, ts))
            futures.append(p.send("orders", key=key, value=value, headers=headers, timestamp_ms=ts))
        p.flush(timeout=30)
        placed = [f.get(timeout=30) for f in futures]
    finally:
        p.close(timeout=10)

    where = {(m.partition, m.offset): s for m, s in zip(placed, sent, strict=True)}
    assert len(where) == len(sent), "every record has an offset of its own"
    partitions_of_key: dict[bytes, set[int]] = {}
    for (partition, _), (key, *_) in where.items():
        partitions_of_key.setdefault(key, set()).add(partition)
    assert all(len(ps) == 1 for ps in partitions_of_key.values()), "one key, one partition"
    assert {partition for partition, _ in where} == {0, 1, 2}

    for partition in range(3):
        expected = sorted((o, s) for (p_, o), s in where.items() if p_ == partition)
        records = read_natively(cluster, "orders", partition, len(expected))
        got = [(r.offset, (r.key, r.value, native_headers(r), r.timestamp_ms)) for r in records]
        assert got == [(o, (k, v, h, ts)) for o, (k, v, h, ts) in expected]
        sent_order = [ts for _, (*_, ts) in expected]
        assert sent_order == sorted(sent_order), "a partition keeps the order they were sent in"


def test_native_records_read_back_through_confluent_kafka_and_aiokafka(cluster):
    written: dict[tuple[int, int], tuple] = {}
    with cluster.client(timeout=20) as client:
        client.create_topic("native", partitions=2, replicas=3)
        for partition in range(2):
            records = [
                Record(
                    None if i % 4 == 3 else b"value %d/%d" % (partition, i),  # tombstones: null
                    key=None if i % 4 == 0 else b"key-%d" % i,
                    timestamp_ms=BASE_TS + 1000 * partition + i,
                    headers=[("n", b"%d" % i), ("bin", b"\x00\xff")] if i % 2 else None,
                )
                for i in range(25)
            ]
            # Two appends: two quorumlog batches, each encoded into a Kafka batch on fetch.
            for chunk in (records[:10], records[10:]):
                result = client.append(chunk, topic="native", partition=partition, details=True)
                for offset, r in zip(
                    range(result.first_offset, result.last_offset + 1), chunk, strict=True
                ):
                    written[(partition, offset)] = (r.key, r.value, r.headers or [], r.timestamp_ms)

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "unused",  # required by the client; assign() uses no group
            "enable.auto.commit": False,
        }
    )
    seen = {}
    try:
        consumer.assign([TopicPartition("native", p, OFFSET_BEGINNING) for p in range(2)])
        deadline = time.monotonic() + 30
        while len(seen) < len(written) and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is None:
                continue
            assert m.error() is None, m.error()
            seen[(m.partition(), m.offset())] = (
                m.key(),
                m.value(),
                list(m.headers() or []),
                m.timestamp()[1],
            )
    finally:
        consumer.close()
    assert seen == written

    async def aio() -> dict:
        c = AIOKafkaConsumer(
            bootstrap_servers=cluster.kafka_bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=15_000,
        )
        await c.start()
        got = {}
        try:
            c.assign([AioTopicPartition("native", p) for p in range(2)])
            await c.seek_to_beginning()
            deadline = time.monotonic() + 30
            while len(got) < len(written) and time.monotonic() < deadline:
                for messages in (await c.getmany(timeout_ms=1000)).values():
                    for m in messages:
                        got[(m.partition, m.offset)] = (
                            m.key,
                            m.value,
                            list(m.headers),
                            m.timestamp,
                        )
        finally:
            await c.stop()
        return got

    assert asyncio.run(aio()) == written


def test_metadata_lists_each_partition_with_a_leader_and_an_unknown_topic_is_an_error(
    cluster, admin
):
    create(admin, "listed", partitions=4)

    def leaders():
        topic = admin.list_topics(topic="listed", timeout=10).topics["listed"]
        ok = topic.error is None and all(p.leader in cluster.ids for p in topic.partitions.values())
        return topic if ok else None

    topic = wait_until(leaders, 30, "a leader for every partition")
    assert sorted(topic.partitions) == [0, 1, 2, 3]
    assert all(sorted(p.replicas) == cluster.ids for p in topic.partitions.values())
    metadata = admin.list_topics(timeout=10)
    assert "listed" in metadata.topics
    assert {(b.id, b.host, b.port) for b in metadata.brokers.values()} == {
        (i, "127.0.0.1", cluster.kafka_ports[i - 1]) for i in cluster.ids
    }

    missing = admin.list_topics(topic="no-such-topic", timeout=10).topics["no-such-topic"]
    assert missing.error is not None
    assert missing.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # A produce to it is answered with the error, not left waiting.
    with connect(cluster) as sock:
        batch = kafka_batch([(None, b"lost", BASE_TS)])
        error, _ = produce(sock, "no-such-topic", 0, batch, 5150)
        assert error == UNKNOWN_TOPIC_OR_PARTITION
        error, _ = produce(sock, "listed", 4, batch, 5151)
        assert error == UNKNOWN_TOPIC_OR_PARTITION


def test_an_idempotent_producers_retried_batch_is_stored_once(cluster, admin):
    with cluster.client(timeout=20) as client:
        client.create_topic("retried", partitions=1, replicas=3)
    init = InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60_000)
    first = [(b"k%d" % i, b"first %d" % i, BASE_TS + i) for i in range(10)]
    second = [(b"k%d" % i, b"second %d" % i, BASE_TS + 10 + i) for i in range(5)]
    with connect(cluster, leader_of(admin, "retried", 0)) as sock:
        ids = call(sock, init, InitProducerIdResponse, 1)
        assert ids.error_code == 0 and ids.producer_id >= 0
        pid, epoch = ids.producer_id, ids.producer_epoch
        batch = kafka_batch(first, pid, epoch, sequence=0)
        # The same batch three times, as a producer retries one whose answer it lost.
        answers = [produce(sock, "retried", 0, batch, 10 + n) for n in range(3)]
        next_one = produce(sock, "retried", 0, kafka_batch(second, pid, epoch, sequence=10), 20)
    error, base = answers[0]
    assert error == 0
    assert answers == [(0, base)] * 3, "a retry is answered with the first offsets"
    assert next_one == (0, base + len(first))
    records = read_natively(cluster, "retried", 0, len(first) + len(second))
    assert [(r.key, r.value, r.timestamp_ms) for r in records] == first + second
    assert [r.offset for r in records] == list(range(base, base + len(first) + len(second)))


def leader_of(admin: AdminClient, topic: str, partition: int) -> int:
    """The partition's leader, as Kafka's Metadata names it."""

    def leader():
        found = admin.list_topics(topic=topic, timeout=10).topics[topic]
        return None if found.error else max(found.partitions[partition].leader, 0) or None

    return wait_until(leader, 20, f"a leader of {topic}/{partition}")


def test_list_offsets_by_time_finds_the_first_record_at_or_after_it(cluster, admin):
    """Kafka's ListOffsets (offsets_for_times): the earliest offset whose timestamp is at or
    after the time; none (-1) past the last record."""
    with cluster.client(timeout=20) as client:
        client.create_topic("stamped", partitions=2, replicas=3)
        native = [Record(b"n%d" % i, timestamp_ms=BASE_TS + i) for i in range(10)]
        first_native = client.append(native, topic="stamped", partition=0, details=True)
    with connect(cluster, leader_of(admin, "stamped", 1)) as sock:
        batch = kafka_batch([(None, b"k%d" % i, BASE_TS + i) for i in range(10)])
        error, first_kafka = produce(sock, "stamped", 1, batch, 3)
    assert error == 0
    firsts = {0: first_native.first_offset, 1: first_kafka}
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused"})
    try:
        for partition, first in firsts.items():
            for delta, expected in [(0, first), (5, first + 5), (9, first + 9), (10, -1)]:
                [found] = consumer.offsets_for_times(
                    [TopicPartition("stamped", partition, BASE_TS + delta)], timeout=10
                )
                assert (partition, delta, found.offset) == (partition, delta, expected)
    finally:
        consumer.close()


def test_a_fetch_carries_at_most_its_max_bytes_over_all_partitions(cluster, admin):
    """KIP-74: the request's max_bytes bounds the whole response (the first batch goes
    whole); past it the partitions answer with no records, so a fetch of many partitions
    cannot take a partition's maximum of memory for each."""
    partitions = 6
    with cluster.client(timeout=20) as client:
        client.create_topic("bounded", partitions=partitions, replicas=3)
        for p in range(partitions):
            for _ in range(16):  # 16 batches of 4 KiB each
                client.append([random.randbytes(4096)], topic="bounded", partition=p)
    leaders = [leader_of(admin, "bounded", p) for p in range(partitions)]
    node = max(set(leaders), key=leaders.count)
    led = [p for p in range(partitions) if leaders[p] == node]
    assert len(led) >= 2
    topic = FetchRequest.FetchTopic(
        topic="bounded",
        partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=p, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20
            )
            for p in led
        ],
    )
    for max_bytes, at_most in ((10_000, 10_000 + 4200), (1 << 30, None)):
        request = FetchRequest[4](
            replica_id=-1,
            max_wait_ms=100,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=0,
            topics=[topic],
        )
        with connect(cluster, node) as sock:
            response = call(sock, request, FetchResponse, 7)
        answers = response.responses[0].partitions
        sizes = [len(a.records or b"") for a in answers]
        assert all(a.error_code == 0 for a in answers)
        if at_most is None:
            assert all(size > 60_000 for size in sizes), sizes  # each partition whole
        else:
            assert 0 < sum(sizes) <= at_most and max(sizes[1:]) < 4096, sizes


def test_a_batch_whose_records_do_not_match_its_header_is_refused(cluster, admin):
    """A producer's batch with a valid CRC but fewer records than its count says: Kafka
    answers CORRUPT_MESSAGE; stored, it would fail every native read of the partition."""
    with cluster.client(timeout=20) as client:
        client.create_topic("malformed", partitions=1, replicas=3)
    one = kafka_batch([(b"k", b"v", BASE_TS)])
    header = bytearray(one[:61])
    struct.pack_into(">ii", header, 23, 1, 0)  # last offset delta 1 ...
    struct.pack_into(">i", header, 57, 2)  # ... of 2 records
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + one[61:]))
    with connect(cluster, leader_of(admin, "malformed", 0)) as sock:
        error, _ = produce(sock, "malformed", 0, bytes(header) + one[61:], 1)
    assert error == CORRUPT_MESSAGE


def test_topics_are_deleted_through_the_admin_client(cluster, admin):
    create(admin, "doomed", partitions=2)
    again = admin.create_topics([NewTopic("doomed", num_partitions=2, replication_factor=3)])
    with pytest.raises(Exception) as exists:
        again["doomed"].result(timeout=30)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    assert admin.delete_topics(["doomed"])["doomed"].result(timeout=30) is None
    with cluster.client(timeout=20) as client:
        assert "doomed" not in client.topics()
    wait_until(
        lambda: "doomed" not in admin.list_topics(timeout=10).topics, 20, "doomed leaves metadata"
    )
    gone = admin.delete_topics(["doomed"])["doomed"]
    with pytest.raises(Exception) as unknown:
        gone.result(timeout=30)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_an_unsupported_api_is_answered_in_order_and_the_connection_stays_up(cluster):
    with connect(cluster, node_id=2) as sock:
        # Pipelined: DescribeClientQuotas (api 48, not served), ApiVersions v2, and 48 again.
        sock.sendall(
            raw_frame(48, 0, 1001)
            + request_bytes(ApiVersionsRequest[2](), 1002)
            + raw_frame(48, 0, 1003)
        )
        first = receive_frame(sock)
        size, correlation_id, _throttle_ms, error = struct.unpack_from(">iiih", first)
        assert (size, correlation_id, error) == (len(first) - 4, 1001, UNSUPPORTED_VERSION)
        versions = ApiVersionsResponse.decode(
            receive_frame(sock), version=2, header=True, framed=True
        )
        assert versions.header.correlation_id == 1002
        assert versions.error_code == 0
        assert {k.api_key for k in versions.api_keys} >= {0, 1, 2, 3, 18, 19, 20, 22}
        assert struct.unpack_from(">iiih", receive_frame(sock))[1:4:2] == (
            1003,
            UNSUPPORTED_VERSION,
        )


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(random.Random(7).randbytes(4096), id="random bytes"),
        pytest.param(raw_frame(0, 7, 1, random.Random(2).randbytes(300)), id="random produce"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n", id="http"),
        pytest.param(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 64, id="huge size"),
        pytest.param(struct.pack(">i", -1) + b"\x00" * 64, id="negative size"),
        pytest.param(struct.pack(">i", 2) + b"\x00\x03", id="size below a header"),
        pytest.param(
            struct.pack(">ihhih", 12, 3, 1, 9, 0x7FFF) + b"ab", id="client id past the frame"
        ),
    ],
)
def test_garbage_closes_its_connection(cluster, garbage):
    with connect(cluster) as sock:
        sock.sendall(garbage)
        assert_closed_by_peer(sock)


def test_a_half_frame_then_close_and_the_listener_still_serves_producers(cluster, admin):
    whole = request_bytes(ApiVersionsRequest[2](), 1)
    for node_id in cluster.ids:
        with connect(cluster, node_id) as sock:
            sock.sendall(whole[: len(whole) // 2])
            sock.shutdown(socket.SHUT_WR)
            assert_closed_by_peer(sock)
        # ...and a second garbage connection while another one is alive and served
        with connect(cluster, node_id) as good, connect(cluster, node_id) as bad:
            bad.sendall(struct.pack(">i", 1 << 30) + b"\x00" * 16)
            good.sendall(request_bytes(ApiVersionsRequest[0](), 77))
            assert (
                ApiVersionsResponse.decode(
                    receive_frame(good), version=0, header=True, framed=True
                ).header.correlation_id
                == 77
            )
            assert_closed_by_peer(bad)

    create(admin, "after-garbage", partitions=1)
    p = producer(cluster)
    try:
        placed = p.send("after-garbage", key=b"k", value=b"still serving").get(timeout=30)
    finally:
        p.close(timeout=10)
    [record] = read_natively(cluster, "after-garbage", 0, 1)
    assert (record.offset, record.key, record.value) == (placed.offset, b"k", b"still serving")
    assert all(proc.poll() is None for proc in cluster.procs.values())
