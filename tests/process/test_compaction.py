"""Real processes: a compacted topic (cleanup.policy=compact) keeps each key's latest record
where it was written, drops tombstones after delete.retention.ms, refuses records without a
key, and says what its cleaner did; Kafka clients read its holes and write its tombstones."""

from __future__ import annotations

import json
import os
import random
import re
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from quorumlog import InvalidRecordError, QuorumLogError, Record
from quorumlog.cli.localcluster import ProcessCluster
from tests.process.kafka_support import kafka_cluster
from tests.process.test_cli import ql
from tests.process.test_topics import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for the module, with Kafka listeners and consoles: each test has topics
    of its own (the one that kills a node starts it again)."""
    yield from kafka_cluster(str(tmp_path_factory.mktemp("compaction")), http=True)


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

        # The console's pages count records, not offsets: the last 10 are the last 10
        # held, and the page before them the 10 before, however many holes lie between.
        def page(query: str) -> list[int]:
            api = f"http://127.0.0.1:{leader_port}/api/topics/users/0/messages?{query}"
            return [r["offset"] for r in json.loads(urllib.request.urlopen(api).read())["records"]]

        offsets = sorted(all_records(client, "users"))
        assert page("last=10") == offsets[-10:]
        assert page(f"before={offsets[-10]}&limit=10") == offsets[-20:-10]
        assert page(f"before={offsets[5]}&limit=10") == offsets[:10], "at most the first page"
        html = urllib.request.urlopen(
            f"http://127.0.0.1:{leader_port}/topics/users/0/messages?last=10"
        ).read()
        assert f"messages?before={offsets[-10]}".encode() in html


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


def disk_bytes(cluster: ProcessCluster, node_id: int, topic: str) -> int:
    """The bytes a node's replicas of `topic` take on its disk (segments, indexes, state)."""
    root = os.path.join(cluster.data_dir(node_id), "topics", topic)
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(root)
        for name in names
    )


@pytest.mark.slow
def test_two_hundred_thousand_records_over_a_thousand_keys_with_a_leader_killed(cluster):
    """Issue 47's scale: 200,000 records over 1,000 keys into 4 partitions, the leader of one
    killed half-way and restarted; then every key's last acknowledged value reads back, at
    most one record per key outside the active segment, tombstones gone after
    delete.retention.ms, and the disk use down to about what the latest values need."""
    rng = random.Random(47)
    topic, keys, per_call = "state", 1000, 2000
    settings = {**SMALL_SEGMENTS, "segment.bytes": 256 * 1024, "delete.retention.ms": 3_000}
    latest: dict[bytes, bytes | None] = {}
    written_bytes = 0

    def append_acknowledged(client, records: list[Record]) -> None:
        # Retried whole until acknowledged: a retry writes the same values again, so each
        # key's latest value is the one acknowledged last, whatever the first try left.
        deadline = time.monotonic() + 60
        while True:
            try:
                client.append_spread(records, topic=topic)
                break
            except QuorumLogError:
                assert time.monotonic() < deadline, "no append taken for 60 s"
                time.sleep(0.2)
        latest.update((r.key, r.value) for r in records)

    with cluster.client(timeout=10) as client:
        client.create_topic(topic, partitions=4, replicas=3, config=settings)
        killed = None
        try:
            for call in range(200_000 // per_call):
                if call == 50:  # half-way: SIGKILL the leader of partition 0
                    (row, *_) = client.describe_topic(topic)
                    killed = row["leader_id"]
                    cluster.kill(killed)
                if call == 75:
                    cluster.start(killed)
                    cluster.wait_listening()
                records = []
                for _ in range(per_call):
                    key = b"key-%d" % rng.randrange(keys)
                    value = b"%s@%d:" % (key, call) + rng.randbytes(80)
                    records.append(Record(value, key=key))
                written_bytes += sum(len(r.key) + len(r.value) for r in records)
                append_acknowledged(client, records)
        finally:
            if killed is not None and killed not in cluster.procs:
                cluster.start(killed)
        deleted = [b"key-%d" % k for k in range(0, keys, 10)]
        append_acknowledged(client, [Record(None, key=k) for k in deleted])
        # Fill each partition's active segment with keys written once, so that every
        # record above lies in a closed segment, the part a cleaner rewrites.
        append_acknowledged(
            client, [Record(rng.randbytes(900), key=b"filler-%d" % i) for i in range(1_600)]
        )
        before = {n: disk_bytes(cluster, n, topic) for n in cluster.ids}

        def compacted() -> dict[int, dict[int, Record]] | None:
            held = {p: all_records(client, topic, p) for p in range(4)}
            ours = [r for p in held.values() for r in p.values() if r.key.startswith(b"key-")]
            expected = keys - len(deleted)
            return held if len(ours) == len({r.key for r in ours}) == expected else None

        held = wait_until(compacted, 180, "each partition compacted, its tombstones dropped")
        seen: dict[bytes, bytes | None] = {}
        for records in held.values():
            for record in records.values():
                if record.key.startswith(b"key-"):
                    assert record.key not in seen, f"{record.key!r} held twice"
                    seen[record.key] = record.value
        assert seen == {k: v for k, v in latest.items() if v is not None and k.startswith(b"key-")}
        cluster.wait_listening()
        live_bytes = sum(len(k) + len(v) for k, v in seen.items())

        def disk_dropped() -> dict[int, int] | None:
            after = {n: disk_bytes(cluster, n, topic) for n in cluster.ids}
            return after if all(after[n] < written_bytes / 10 for n in cluster.ids) else None

        after = wait_until(disk_dropped, 180, "every replica's disk use down")
        assert all(before[n] > after[n] for n in cluster.ids), (before, after)
        assert live_bytes < written_bytes / 100, "the test's keys are few against its writes"
