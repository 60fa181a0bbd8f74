"""Real processes: Apache Kafka 4.4's own command-line tools (the Java programs behind
kafka-topics.sh, kafka-console-producer.sh, kafka-console-consumer.sh,
kafka-consumer-groups.sh, kafka-configs.sh, kafka-get-offsets.sh and
kafka-producer-perf-test.sh) against quorumlog's Kafka listener, one 3-node cluster for
the module. What each tool prints is checked (some print an error and exit 0), and what
it changed is read back natively or through the next tool.

The jars come from Maven Central (java/kafka/pom.xml, bench/kafka_java.py); without java
17+, or without the jars and mvn to fetch them, the module is skipped, saying why."""

from __future__ import annotations

import os
import random
import string
import subprocess
import time

import pytest

from quorumlog import Client
from quorumlog.bench import kafka_java
from quorumlog.bench.kafka_java import (
    CONFIGS,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_GROUPS,
    GET_OFFSETS,
    PRODUCER_PERF,
    TOPICS,
    run_tool,
)
from quorumlog.cli.localcluster import ProcessCluster
from tests.process.kafka_support import kafka_cluster
from tests.process.test_topics import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = kafka_java.why_unavailable()
    if why is not None:
        pytest.skip(f"Kafka's Java tools are not available: {why}")
    root = str(tmp_path_factory.mktemp("kafka-java"))
    yield from kafka_cluster(root)
    # A Kafka connection that failed on a bug (not on bad bytes) is logged so: none may.
    for node_id in (1, 2, 3):
        with open(os.path.join(root, f"node{node_id}.log")) as log:
            text = log.read()
        assert "kafka_connection_failed" not in text, f"node {node_id}"
        assert "kafka_handler_failed" not in text, f"node {node_id}"


def tool(
    cluster: ProcessCluster, main_class: str, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a tool against the cluster's Kafka listeners; it must exit 0."""
    done = run_tool(main_class, ["--bootstrap-server", cluster.kafka_bootstrap, *args], 90, input)
    assert done.returncode == 0, f"{main_class} {args} exited {done.returncode}:\n{done.stderr}"
    return done


def failing_tool(
    cluster: ProcessCluster, main_class: str, *args: str
) -> subprocess.CompletedProcess[str]:
    done = run_tool(main_class, ["--bootstrap-server", cluster.kafka_bootstrap, *args], 90)
    assert done.returncode != 0, done.stdout
    return done


def consume(cluster: ProcessCluster, topic: str, count: int, *args: str) -> list[str]:
    """The console consumer's lines until it has `count` records (it fails past 30 s)."""
    done = tool(
        cluster,
        CONSOLE_CONSUMER,
        "--topic",
        topic,
        "--max-messages",
        str(count),
        "--timeout-ms",
        "30000",
        *args,
    )
    assert f"Processed a total of {count} messages" in done.stderr, done.stderr
    return done.stdout.splitlines()


def words(count: int, seed: int) -> list[str]:
    pick = random.Random(seed)
    return [
        f"{i}-"
        + "".join(pick.choices(string.ascii_letters + string.digits, k=pick.randrange(1, 40)))
        for i in range(count)
    ]


def read_partition(cluster: ProcessCluster, topic: str, partition: int) -> list:
    """Every record of a partition, through the native Client: reads go to the leader,
    until one finds no record past the last (the partition's last entry may be a leader's
    barrier, which reads skip: its end offset is no record's)."""
    out: list = []
    deadline = time.monotonic() + 20
    with Client(cluster.brokers, timeout=20) as client:
        while time.monotonic() < deadline:
            position = out[-1].offset + 1 if out else 0
            more = client.read(position, topic=topic, partition=partition, max_records=1000)
            if not more:
                return out
            out += more
    raise AssertionError(f"{topic}/{partition}: still reading after 20 s, at {out[-1:]}")


def described(output: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """kafka-topics --describe of one topic: its line's fields, and one dict per partition
    ('Topic: t\\tPartition: 0\\tLeader: 2\\tReplicas: 2,1,3\\t...')."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    fields = [dict(f.split(": ", 1) for f in line.split("\t") if ": " in f) for line in lines]
    return fields[0], fields[1:]


def group_table(output: str) -> list[dict[str, str]]:
    """kafka-consumer-groups' table (--describe, --reset-offsets) as one dict per row;
    rows of a group without members have '-' in the member columns."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in output.splitlines():
        if line.startswith("GROUP "):
            header = line.split()
        elif header and line.strip():
            rows.append(dict(zip(header, line.split(), strict=False)))
    return rows


def offset_deletions(output: str) -> dict[str, str]:
    """kafka-consumer-groups --delete-offsets: each partition's status."""
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("TOPIC "))
    return {
        line.split()[1]: line.split(None, 2)[2].strip()
        for line in lines[header + 1 :]
        if line.strip()
    }


def test_kafka_topics_creates_lists_describes_and_alters(cluster):
    done = tool(cluster, TOPICS, "--create", "--topic", "jt-topics", "--partitions", "2")
    assert done.stdout.strip() == "Created topic jt-topics."
    with Client(cluster.brokers) as c:
        assert c.topics(details=True)["jt-topics"] == (2, 3)
    assert "jt-topics" in tool(cluster, TOPICS, "--list").stdout.split()

    topic, partitions = described(
        tool(cluster, TOPICS, "--describe", "--topic", "jt-topics").stdout
    )
    assert (topic["Topic"], topic["PartitionCount"], topic["ReplicationFactor"]) == (
        "jt-topics",
        "2",
        "3",
    )
    assert [p["Partition"] for p in partitions] == ["0", "1"]
    for p in partitions:
        replicas = p["Replicas"].split(",")
        assert sorted(replicas) == ["1", "2", "3"], p
        assert p["Leader"] in replicas, p
        assert sorted(p["Isr"].split(",")) == ["1", "2", "3"], p

    tool(cluster, TOPICS, "--alter", "--topic", "jt-topics", "--partitions", "4")
    with Client(cluster.brokers) as c:
        assert c.topics()["jt-topics"] == 4
    topic, partitions = described(
        tool(cluster, TOPICS, "--describe", "--topic", "jt-topics").stdout
    )
    assert topic["PartitionCount"] == "4"
    assert [p["Partition"] for p in partitions] == ["0", "1", "2", "3"]

    # What Kafka refuses, quorumlog refuses, with the error the tool names.
    again = failing_tool(cluster, TOPICS, "--create", "--topic", "jt-topics", "--partitions", "1")
    assert "TopicExistsException" in again.stderr, again.stderr
    tool(
        cluster, TOPICS, "--create", "--topic", "jt-topics", "--partitions", "1", "--if-not-exists"
    )
    fewer = failing_tool(cluster, TOPICS, "--alter", "--topic", "jt-topics", "--partitions", "2")
    assert "InvalidPartitionsException" in fewer.stderr, fewer.stderr
    missing = failing_tool(cluster, TOPICS, "--describe", "--topic", "jt-nowhere")
    assert "does not exist" in missing.stderr, missing.stderr


def test_topic_configs_through_kafka_topics_and_kafka_configs(cluster):
    tool(
        cluster,
        *(TOPICS, "--create", "--topic", "jt-config", "--partitions", "1"),
        *("--config", "retention.ms=60000"),
    )
    topic, _ = described(tool(cluster, TOPICS, "--describe", "--topic", "jt-config").stdout)
    assert "retention.ms=60000" in topic["Configs"].split(","), topic
    with Client(cluster.brokers) as c:
        assert c.describe_topic("jt-config")[0]["config"]["retention.ms"] == 60000

    entity = ("--entity-type", "topics", "--entity-name", "jt-config")
    done = tool(cluster, CONFIGS, "--alter", *entity, "--add-config", "retention.ms=3600000")
    assert "Completed updating config for topic jt-config." in done.stdout, done.stdout
    with Client(cluster.brokers) as c:
        assert c.describe_topic("jt-config")[0]["config"]["retention.ms"] == 3600000
    shown = tool(cluster, CONFIGS, "--describe", *entity).stdout
    assert "retention.ms=3600000 " in shown, shown


def test_console_producer_then_consumer_read_back_exactly(cluster):
    tool(cluster, TOPICS, "--create", "--topic", "jt-console", "--partitions", "1")
    values = words(60, seed=1)
    tool(cluster, CONSOLE_PRODUCER, "--topic", "jt-console", input="\n".join(values) + "\n")

    assert consume(cluster, "jt-console", 60, "--from-beginning") == values
    records = read_partition(cluster, "jt-console", 0)
    assert [r.value.decode() for r in records] == values
    # From a given offset on: the 11th record on, by the offset the native read gives it.
    eleventh = records[10].offset
    lines = consume(
        cluster,
        *("jt-console", 5, "--partition", "0", "--offset", str(eleventh)),
        *("--formatter-property", "print.offset=true"),
    )
    assert [line.split("\t", 1)[1] for line in lines] == values[10:15]
    assert lines[0].startswith(f"Offset:{eleventh}\t"), lines


def test_console_producer_keys_and_headers_read_back_per_key(cluster):
    tool(cluster, TOPICS, "--create", "--topic", "jt-keyed", "--partitions", "3")
    sent = [(f"n:{i},src:cli", f"user-{i % 5}", f"event-{i}") for i in range(40)]
    tool(
        cluster,
        *(CONSOLE_PRODUCER, "--topic", "jt-keyed"),
        *("--reader-property", "parse.key=true", "--reader-property", "parse.headers=true"),
        input="".join("\t".join(record) + "\n" for record in sent),
    )
    lines = consume(
        cluster,
        *("jt-keyed", 40, "--from-beginning"),
        *("--formatter-property", "print.key=true"),
        *("--formatter-property", "print.headers=true"),
        *("--formatter-property", "print.partition=true"),
    )
    got = [line.split("\t") for line in lines]
    assert sorted((h, k, v) for _, h, k, v in got) == sorted(sent)
    # One key, one partition, in the order produced.
    partitions: dict[str, set[str]] = {}
    for partition, _, key, _ in got:
        partitions.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partitions.values()), partitions
    for key in partitions:
        assert [v for _, _, k, v in got if k == key] == [v for _, k, v in sent if k == key]
    # Natively: the same keys, values and headers.
    native = [
        (
            ",".join(f"{k}:{v.decode()}" for k, v in r.headers or []),
            r.key.decode(),
            r.value.decode(),
        )
        for p in range(3)
        for r in read_partition(cluster, "jt-keyed", p)
    ]
    assert sorted(native) == sorted(sent)


@pytest.mark.slow
def test_consumer_groups_describe_and_reset_after_a_console_consumer_committed(cluster):
    tool(cluster, TOPICS, "--create", "--topic", "jt-groups", "--partitions", "2")
    values = words(30, seed=2)
    # Keyed, so that both partitions have records (unkeyed, the producer's sticky
    # partitioner may put the whole batch in one) and the consumer commits both.
    tool(
        cluster,
        *(CONSOLE_PRODUCER, "--topic", "jt-groups", "--reader-property", "parse.key=true"),
        input="".join(f"key-{i % 6}\t{v}\n" for i, v in enumerate(values)),
    )
    assert all(read_partition(cluster, "jt-groups", p) for p in range(2))
    read = consume(cluster, "jt-groups", 30, "--from-beginning", "--group", "jt-g")
    assert sorted(read) == sorted(values)

    with Client(cluster.brokers) as c:
        ends = {p: c.end_offset(topic="jt-groups", partition=p) + 1 for p in range(2)}
        starts = {p: c.start_offset(topic="jt-groups", partition=p) for p in range(2)}
    assert "jt-g" in tool(cluster, CONSUMER_GROUPS, "--list").stdout.split()
    rows = group_table(tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "jt-g").stdout)
    assert sorted(r["PARTITION"] for r in rows) == ["0", "1"], rows
    for r in rows:
        assert (r["GROUP"], r["TOPIC"]) == ("jt-g", "jt-groups"), r
        end = str(ends[int(r["PARTITION"])])
        assert (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) == (end, end, "0"), r
        assert r["CONSUMER-ID"] == "-", r  # the console consumer has left
    state = group_table(
        tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "jt-g", "--state").stdout
    )
    assert [(s["STATE"], s["#MEMBERS"]) for s in state] == [("Empty", "0")], state

    # Back to the start: what --dry-run plans, --execute commits, and the group's next
    # consumer reads everything again from there.
    reset = ("--reset-offsets", "--to-earliest", "--group", "jt-g", "--topic", "jt-groups")
    planned = group_table(tool(cluster, CONSUMER_GROUPS, *reset, "--dry-run").stdout)
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in planned} == starts
    rows = group_table(tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "jt-g").stdout)
    assert all(r["LAG"] == "0" for r in rows), rows  # a dry run changes nothing
    executed = group_table(tool(cluster, CONSUMER_GROUPS, *reset, "--execute").stdout)
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in executed} == starts
    rows = group_table(tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "jt-g").stdout)
    for r in rows:
        p = int(r["PARTITION"])
        assert int(r["CURRENT-OFFSET"]) == starts[p], r
        assert int(r["LAG"]) == ends[p] - starts[p], r
    again = consume(cluster, "jt-groups", 30, "--group", "jt-g")
    assert sorted(again) == sorted(values)

    # To an offset of one partition: its 3rd record on.
    records = read_partition(cluster, "jt-groups", 0)
    at = records[2].offset
    tool(
        cluster,
        *(CONSUMER_GROUPS, "--reset-offsets", "--to-offset", str(at), "--group", "jt-g"),
        *("--topic", "jt-groups:0", "--execute"),
    )
    rows = group_table(tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "jt-g").stdout)
    assert {r["PARTITION"]: r["CURRENT-OFFSET"] for r in rows} == {
        "0": str(at),
        "1": str(ends[1]),
    }, rows
    behind = [r.value.decode() for r in records[2:]]
    assert consume(cluster, "jt-groups", len(behind), "--group", "jt-g") == behind

    # Deleting the group's offsets of the topic: the tool exits 0 whatever happens, and
    # says per partition.
    deleted = tool(
        cluster, CONSUMER_GROUPS, "--delete-offsets", "--group", "jt-g", "--topic", "jt-groups"
    ).stdout
    assert "Request succeeded for deleting offsets from group jt-g." in deleted, deleted
    assert offset_deletions(deleted) == {"0": "Successful", "1": "Successful"}, deleted
    shown = tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "jt-g")
    assert "jt-groups" not in shown.stdout, shown.stdout
    # With no offsets left, the group's next consumer starts where it is told to: here at
    # the beginning (with them, it would have started at the end and read nothing).
    again = consume(cluster, "jt-groups", 30, "--group", "jt-g", "--from-beginning")
    assert sorted(again) == sorted(values)


def test_consumer_groups_describe_a_live_member(cluster):
    tool(cluster, TOPICS, "--create", "--topic", "jt-live", "--partitions", "3")
    consumer = subprocess.Popen(
        kafka_java.java_command(
            CONSOLE_CONSUMER,
            [
                *("--bootstrap-server", cluster.kafka_bootstrap, "--topic", "jt-live"),
                *("--group", "jt-live-g", "--timeout-ms", "60000"),
            ],
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:

        def stable() -> list[dict[str, str]] | None:
            state = tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "jt-live-g", "--state")
            rows = group_table(state.stdout)
            return rows if rows and rows[0].get("STATE") == "Stable" else None

        [row] = wait_until(stable, 60, "the group to be Stable")
        assert (row["ASSIGNMENT-STRATEGY"], row["#MEMBERS"]) == ("range", "1"), row
        members = tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "jt-live-g", "--members")
        [header, *rows] = [line.split() for line in members.stdout.splitlines() if line.strip()]
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"], header
        # One member with the three partitions (its HOST and CLIENT-ID are left out: they
        # are blank today, where Kafka names the client's address and client.id).
        [member] = rows
        assert (member[0], member[-1]) == ("jt-live-g", "3"), member
        # Kafka refuses to move a live group's offsets, and says why.
        refused = tool(
            cluster,
            *(CONSUMER_GROUPS, "--reset-offsets", "--to-earliest", "--group", "jt-live-g"),
            *("--all-topics", "--execute"),
        )
        assert "can only be reset if the group 'jt-live-g' is inactive" in refused.stdout + (
            refused.stderr
        )
        # Nor may the offsets of a topic it subscribes to be deleted.
        kept = tool(
            cluster,
            CONSUMER_GROUPS,
            "--delete-offsets",
            "--group",
            "jt-live-g",
            "--topic",
            "jt-live",
        ).stdout
        statuses = offset_deletions(kept)
        assert sorted(statuses) == ["0", "1", "2"], kept
        assert all("GroupSubscribedToTopicException" in s for s in statuses.values()), kept
    finally:
        consumer.kill()
        consumer.wait()


def test_producer_perf_test_writes_every_record(cluster):
    tool(cluster, TOPICS, "--create", "--topic", "jt-perf", "--partitions", "1")
    done = tool(
        cluster,
        *(PRODUCER_PERF, "--topic", "jt-perf", "--num-records", "2000", "--record-size", "100"),
        *("--throughput", "-1", "--producer-props", f"bootstrap.servers={cluster.kafka_bootstrap}"),
    )
    assert "2000 records sent" in done.stdout, done.stdout
    records = read_partition(cluster, "jt-perf", 0)
    assert len(records) == 2000
    assert {len(r.value) for r in records} == {100}
    # kafka-get-offsets names the partition's end: past the last record.
    shown = tool(cluster, GET_OFFSETS, "--topic", "jt-perf").stdout.split()
    assert shown == [f"jt-perf:0:{records[-1].offset + 1}"]
