"""Real processes: records found by time (the time index, log/timeindex.py) through
`Client.offset_for_time`, `consume --from-time`, `group reset-offsets --to-time` and Kafka's
ListOffsets (kafka-python's `offsets_for_times`), with timestamps that go back in offset
order; and a node restarted with its index files deleted or damaged answers the same.
Segments are small here, so that a partition's records span many of them, each indexed."""

from __future__ import annotations

import datetime
import os
import random
import time
import warnings

import pytest

from quorumlog import Client, Consumer, Record
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from tests.process.test_cli import ql
from tests.process.test_topics import wait_until

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

BASE_MS = 1_795_856_400_000  # 2026-11-28T09:00:00Z
CONFIG = "[log]\nsegment_bytes_max = 4096\nindex_interval_bytes = 512\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("times")
    config = root / "quorumlog.toml"
    config.write_text(CONFIG)
    c = ProcessCluster(str(root), config_file=str(config), kafka_ports=free_ports(3))
    c.start_all()
    try:
        c.wait_for_leader()
        yield c
    finally:
        c.stop_all()


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat()


def stamps_out_of_order(rng: random.Random, count: int, base_ms: int) -> list[int]:
    """Mostly rising, often back by up to a minute (several producers' clocks)."""
    out, clock = [], base_ms
    for _ in range(count):
        clock += rng.randint(0, 20_000)
        out.append(clock - rng.choice([0, 0, rng.randint(1, 60_000)]))
    return out


def append_stamped(c: Client, topic: str, partition: int, stamps: list[int]) -> dict[int, int]:
    """Appended in batches of 1-5 records; offset -> timestamp."""
    rng = random.Random(partition)
    at: dict[int, int] = {}
    i = 0
    while i < len(stamps):
        chunk = stamps[i : i + rng.randint(1, 5)]
        records = [
            Record(b"%s-%d-%d" % (topic.encode(), partition, i + j), timestamp_ms=t)
            for j, t in enumerate(chunk)
        ]
        first = c.append(records, topic=topic, partition=partition)
        at.update({first + j: t for j, t in enumerate(chunk)})
        i += len(chunk)
    return at


def oracle(at: dict[int, int], timestamp_ms: int) -> int | None:
    return next((o for o in sorted(at) if at[o] >= timestamp_ms), None)


def targets(at: dict[int, int]) -> list[int]:
    values = sorted(set(at.values()))
    picked = random.Random(7).sample(values, 25)
    return [values[0] - 1, *picked, *(v + 1 for v in picked), values[-1], values[-1] + 1]


@pytest.fixture(scope="module")
def stamped(cluster):
    """Topic `times`, 2 partitions of 200 records each: (partition -> offset -> stamp)."""
    with cluster.client(timeout=20) as c:
        c.create_topic("times", partitions=2, replicas=3)
        rng = random.Random(1)
        written = {
            p: append_stamped(c, "times", p, stamps_out_of_order(rng, 200, BASE_MS)) for p in (0, 1)
        }
    return written


def test_offset_for_time_answers_the_first_record_at_or_after_the_time(cluster, stamped):
    segments = [n for n in os.listdir(partition_dir(cluster, 1, "times", 0)) if n.endswith(".log")]
    assert len(segments) >= 3, "the records span several segments"
    with cluster.client() as c:
        for partition, at in stamped.items():
            for t in targets(at):
                found = c.offset_for_time(t, topic="times", partition=partition)
                assert found == oracle(at, t), (partition, t)
        assert c.offset_for_time(max(stamped[0].values()) + 1, topic="times") is None


def test_consume_from_time_prints_from_that_record(cluster, stamped):
    at = stamped[1]
    t = sorted(at.values())[len(at) // 2] + 1
    first = oracle(at, t)
    b = ["-b", cluster.brokers, "--topic", "times", "--partition", "1"]
    out = ql("consume", *b, "--from-time", iso(t), "--with-offsets", "--max", "3")
    assert out.returncode == 0, out.stderr
    assert [int(line.split(b"\t")[0]) for line in out.stdout.splitlines()] == [
        first,
        first + 1,
        first + 2,
    ]
    zoned = datetime.datetime.fromtimestamp(
        t / 1000, datetime.timezone(datetime.timedelta(hours=2))
    )
    same = ql("consume", *b, "--from-time", zoned.isoformat(), "--with-offsets", "--max", "3")
    assert same.stdout == out.stdout, "an offset from UTC names the same instant"
    past = ql("consume", *b, "--from-time", iso(max(at.values()) + 1))
    assert (past.returncode, past.stdout) == (0, b""), past.stderr


def test_consume_from_a_time_relative_to_now(cluster):
    now_ms = int(time.time() * 1000)
    minute = 60_000
    with cluster.client() as c:
        c.create_topic("recent", partitions=1, replicas=3)
        # Ten minutes apart, from two hours ago to ten minutes ago.
        c.append(
            [Record(b"r%d" % i, timestamp_ms=now_ms - (120 - 10 * i) * minute) for i in range(12)],
            topic="recent",
        )
    b = ["-b", cluster.brokers, "--topic", "recent"]
    out = ql("consume", *b, "--from-time", "-65m")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [b"r%d" % i for i in range(6, 12)]
    assert ql("consume", *b, "--from-time", "-1d").stdout.splitlines()[0] == b"r0"
    assert ql("consume", *b, "--from-time", "-5m").stdout == b""


@pytest.mark.parametrize(
    "value",
    ["yesterday", "2026-11-28T09:00:00", "-10x", "10m", "2026-13-01T00:00:00Z"],
)
def test_a_bad_time_is_one_line_and_exit_2(cluster, value):
    for args in (
        ("consume", "-b", cluster.brokers, "--from-time", value),
        (
            "group",
            "-b",
            cluster.brokers,
            "reset-offsets",
            "g",
            "--topic",
            "times",
            "--to-time",
            value,
        ),
    ):
        out = ql(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.decode().strip().splitlines()) == 1, out.stderr


def test_from_and_from_time_together_are_refused(cluster):
    out = ql("consume", "-b", cluster.brokers, "--from", "3", "--from-time", "-1m")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    out = ql("group", "-b", cluster.brokers, "reset-offsets", "g", "--topic", "times")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr


@pytest.mark.parametrize("past_the_end", [False, True])
def test_group_reset_offsets_to_a_time_sets_each_partitions_first_record_after_it(
    cluster, stamped, past_the_end
):
    """Each partition's first record stamped at or after the time; past the end, its end."""
    everything = sorted([*stamped[0].values(), *stamped[1].values()])
    t = everything[-1] + 1 if past_the_end else everything[len(everything) // 2]
    with Consumer(cluster.brokers, "timed", ["times"]) as member:  # the group, left at once
        member.poll(max_records=1, timeout=1.0)
    b = ["-b", cluster.brokers]
    out = ql("group", *b, "reset-offsets", "timed", "--topic", "times", "--to-time", iso(t))
    assert out.returncode == 0, out.stderr
    with cluster.client() as c:
        ends = {p: c.end_offset(topic="times", partition=p) + 1 for p in stamped}
        committed = {
            r["partition"]: r["committed"] for r in c.describe_group("timed")["partitions"]
        }
    expected = {p: oracle(at, t) for p, at in stamped.items()}
    expected = {p: ends[p] if o is None else o for p, o in expected.items()}
    assert (None in map(oracle, stamped.values(), [t, t])) == past_the_end
    assert out.stdout.decode().splitlines() == [f"times {p} {o}" for p, o in expected.items()]
    assert committed == expected


def test_kafka_offsets_for_times_answers_offsets_and_timestamps(cluster, stamped):
    """kafka-python's `offsets_for_times`, for records written natively (`times`), and for
    a partition where a Kafka producer's records, their own timestamps out of order, follow
    native ones in the same span of time (`ktimes`)."""
    rng = random.Random(5)
    with cluster.client() as c:
        c.create_topic("ktimes", partitions=1, replicas=3)
        native_at = append_stamped(c, "ktimes", 0, stamps_out_of_order(rng, 60, BASE_MS))
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, acks="all")
    kafka_at: dict[int, int] = {}
    try:
        futures = [
            (t, producer.send("ktimes", value=b"k%d" % i, partition=0, timestamp_ms=t))
            for i, t in enumerate(stamps_out_of_order(rng, 60, BASE_MS))
        ]
        producer.flush(timeout=20)
        for t, future in futures:
            kafka_at[future.get(timeout=20).offset] = t
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        for topic, at in (("times", stamped[0]), ("ktimes", {**native_at, **kafka_at})):
            tp = TopicPartition(topic, 0)
            for t in targets(at):
                found = consumer.offsets_for_times({tp: t}, timeout_ms=10_000)[tp]
                expected = oracle(at, t)
                got = None if found is None else (found.offset, found.timestamp)
                assert got == (None if expected is None else (expected, at[expected])), (topic, t)
    finally:
        consumer.close()


def partition_dir(cluster: ProcessCluster, node_id: int, topic: str, partition: int) -> str:
    return os.path.join(cluster.data_dir(node_id), "topics", topic, str(partition), "log")


def test_a_node_restarted_without_its_index_files_answers_the_same(cluster, stamped):
    """The index files are derived: deleted or damaged, `serve` starts, rebuilds them by a
    scan, and answers as before. Asked directly, the restarted node answers from its own
    log."""
    node = 2
    cluster.kill(node)
    sizes = {}  # of every index file, as it was written
    for partition in stamped:
        folder = partition_dir(cluster, node, "times", partition)
        indexes = sorted(n for n in os.listdir(folder) if n.endswith(".index"))
        assert len(indexes) >= 2
        sizes.update(
            {os.path.join(folder, n): os.path.getsize(os.path.join(folder, n)) for n in indexes}
        )
        for name in indexes[::2]:
            os.remove(os.path.join(folder, name))
        for name in indexes[1::2]:
            with open(os.path.join(folder, name), "r+b") as f:
                f.truncate(os.path.getsize(f.name) // 2)
    cluster.start(node)
    wait_until(lambda: cluster.node_status(node), 30, "the node serves again")
    with Client(cluster.address(node), timeout=20, direct=True) as direct:
        for partition, at in stamped.items():
            last = max(at)
            wait_until(
                lambda p=partition, last=last: (
                    direct.end_offset(topic="times", partition=p) >= last
                ),
                30,
                "the restarted node commits what it held",
            )
            for t in targets(at):
                assert direct.offset_for_time(t, topic="times", partition=partition) == oracle(
                    at, t
                )
    with cluster.client() as c:
        for partition in stamped:  # the next flush writes them
            c.append([Record(b"after", timestamp_ms=BASE_MS)], topic="times", partition=partition)

    def rewritten() -> bool:
        return all(os.path.exists(p) and os.path.getsize(p) == n for p, n in sizes.items())

    wait_until(rewritten, 20, "the rebuilt index files are written back")
