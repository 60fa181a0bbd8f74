"""Real processes: a compacted topic (cleanup.policy=compact) keeps each key's latest record
where it was written, drops tombstones after delete.retention.ms, refuses records without a
key, and says what its cleaner did; Kafka clients read its holes and write its tombstones."""

from __future__ import annotations

import json
import os
import re
import urllib.request

import pytest
from confluent_kafka import Producer

from quorumlog import InvalidRecordError, Record
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from tests.process.test_cli import ql
from tests.process.test_topics import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for the module, with Kafka listeners: each test has topics of its own."""
    c = ProcessCluster(
        str(tmp_path_factory.mktemp("compaction")),
        kafka_ports=free_ports(3),
        http_ports=free_ports(3),
    )
    c.start_all()
    try:
        c.wait_for_leader()
        yield c
    finally:
        c.stop_all()


def out(*args: str) -> str:
    result = ql(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


SMALL_SEGMENTS = {
    "cleanup.policy": "compact",
    "segment.bytes": 65_536,  # the least: a few hundred KiB make several closed segments
    "min.cleanable.dirty.ratio": 0.01,
    "delete.retention.ms": 2_000,
}


def all_records(client, topic: str, partition: int = 0) -> dict[int, Record]:
    out: dict[int, Record] = {}
    offset = client.start_offset(topic, partition)
    end = client.end_offset(topic=topic, partition=partition)
    while offset <= end:
        records = client.read(offset, max_records=1000, topic=topic, partition=partition)
        if not records:
            break
        out.update((r.offset, r) for r in records)
        offset = records[-1].offset + 1
    return out


def test_a_compacted_topic_keeps_each_keys_latest_record_at_its_offset(cluster):
    with cluster.client(timeout=20) as client:
        client.create_topic("users", partitions=1, replicas=3, config=SMALL_SEGMENTS)
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        written = 0
        for round_ in range(30):
            records = [
                Record(os.urandom(900), key=b"user-%d" % ((round_ * 10 + i) % 25))
                for i in range(10)
            ]
            if round_ in (5, 20):  # a key written once, then its tombstone
                records.append(Record(b"v" if round_ == 5 else None, key=b"gone"))
            result = client.append(records, topic="users", details=True)
            for offset, record in zip(
                range(result.first_offset, result.last_offset + 1), records, strict=True
            ):
                latest[record.key] = (offset, record.value)
            written += len(records)
        # A last closed segment's worth of unrelated keys, so that the tombstone is in a
        # closed segment too (the active one is never cleaned).
        client.append(
            [Record(os.urandom(900), key=b"filler-%d" % i) for i in range(80)], topic="users"
        )

        def compacted() -> bool:
            held = all_records(client, "users")
            return len(held) < written // 2 and (latest[b"gone"][0] not in held)

        wait_until(compacted, 60, "the cleaner compacts the topic and drops the tombstone")
        held = all_records(client, "users")
        for key, (offset, value) in latest.items():
            if key == b"gone":
                assert not any(r.key == b"gone" for r in held.values())
                continue
            assert held[offset].key == key and held[offset].value == value, key
        keys = [r.key for r in held.values() if not r.key.startswith(b"filler")]
        assert len(keys) == len(set(keys)), "one record per key outside the active segment"
        assert client.end_offset(topic="users") == written + 80 - 1, "offsets never move"
        (row,) = client.describe_topic("users")
        assert row["cleanup_policy"] == "compact"
        assert row["cleaner"]["bytes_reclaimed"] > 0 and row["cleaner"]["last_clean_ms"]
        text = out("topic", "-b", cluster.brokers, "describe", "users", "--header")
        assert "DIRTY" in text and "RECLAIMED_BYTES" in text and "cleanup.policy=compact" in text
        leader_port = cluster.http_ports[row["leader_id"] - 1]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{leader_port}/metrics").read()
        reclaimed = re.search(rb"^quorumlog_cleaner_reclaimed_bytes_total (\S+)$", metrics, re.M)
        assert reclaimed and float(reclaimed.group(1)) > 0, metrics[-2000:]
        assert re.search(rb"^quorumlog_cleaner_behind_seconds ", metrics, re.M)


def test_a_record_without_a_key_is_refused_by_a_compacted_topic(cluster):
    with cluster.client(timeout=20) as client:
        client.create_topic("keyed", config={"cleanup.policy": "compact"})
        with pytest.raises(InvalidRecordError, match="has no key") as refused:
            client.append([Record(b"v", key=b"k"), Record(b"no key")], topic="keyed")
        assert isinstance(refused.value, ValueError)
        assert client.end_offset(topic="keyed") == -1, "the append is refused whole"
        client.append([Record(b"v", key=b"k")], topic="keyed")
    row = json.loads(out("topic", "-b", cluster.brokers, "describe", "keyed", "--json"))
    assert row["cleanup_policy"] == "compact"


def test_create_compact_and_alter_the_policy_from_the_command_line(cluster):
    b = ("topic", "-b", cluster.brokers)
    out(*b, "create", "profiles", "--compact")
    row = json.loads(out(*b, "describe", "profiles", "--json"))
    assert row["config"]["cleanup.policy"] == "compact"
    out(*b, "alter", "profiles", "--set", "cleanup.policy=compact,delete")
    assert (
        json.loads(out(*b, "describe", "profiles", "--json"))["cleanup_policy"] == "compact,delete"
    )
    bad = ql(*b, "alter", "profiles", "--set", "cleanup.policy=tidy")
    assert bad.returncode != 0
    assert b"cleanup.policy is delete, compact or compact,delete" in bad.stderr


def test_a_kafka_producer_gets_invalid_record_for_a_keyless_record(cluster):
    with cluster.client(timeout=20) as client:
        client.create_topic("kafka-compacted", config={"cleanup.policy": "compact"})
    errors = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "retries": 0})
    producer.produce("kafka-compacted", key=b"k", value=None)  # a tombstone: taken
    producer.flush(30)  # a batch of its own: a keyless record refuses its whole batch
    producer.produce("kafka-compacted", value=b"no key", on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors and errors[0] is not None
    assert errors[0].code() == 87 or "INVALID_RECORD" in errors[0].name(), errors[0]
    with cluster.client(timeout=20) as client:
        (tombstone,) = client.read(0, topic="kafka-compacted")
        assert (tombstone.key, tombstone.value) == (b"k", None)
