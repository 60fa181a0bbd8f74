"""Real processes: three Apache Kafka 4.4 brokers (KRaft, each its own controller too),
started by `KafkaBrokers` from the jars Maven fetched, and driven by the same Kafka tools
that tests/process/test_kafka_java_tools.py points at quorumlog: the helper that
`quorumlog bench vs-kafka` starts its Kafka with, checked end to end (start, topics,
records in and out, a group's offsets, stop). Skipped, saying why, without java 17+ or
the jars."""

from __future__ import annotations

import time

import pytest

from quorumlog.bench import kafka_java
from quorumlog.bench.kafka_java import (
    BROKER_JVM,
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_GROUPS,
    TOPICS,
    KafkaBrokers,
    metadata,
    run_tool,
)
from tests.process.test_kafka_consumer_protocol import KAFKA_44_RECONCILIATION, reconciliation
from tests.process.test_kafka_java_tools import described, group_table


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    why = kafka_java.why_unavailable()
    if why is not None:
        pytest.skip(f"Kafka's Java programs are not available: {why}")
    # Groups' offsets in 3 partitions, not Kafka's 50: creating 50 partitions of 3
    # replicas holds the first consumer up for seconds. And the JVM's quick compiler only:
    # three brokers starting on two cores were ready in 14-18 s so, 23-28 s with the
    # optimising one too (a benchmark keeps it; this measures nothing).
    brokers = KafkaBrokers(
        tmp_path_factory.mktemp("kafka-brokers"),
        extra={"offsets.topic.num.partitions": "3"},
        jvm=(*BROKER_JVM, "-XX:TieredStopAtLevel=1"),
    )
    with brokers:
        yield brokers
    assert not brokers.procs


def tool(kafka: KafkaBrokers, main_class: str, *args: str, input: str | None = None):
    done = run_tool(main_class, ["--bootstrap-server", kafka.bootstrap, *args], 90, input)
    assert done.returncode == 0, f"{main_class} {args} exited {done.returncode}:\n{done.stderr}"
    return done


def test_three_brokers_serve_metadata_naming_each_other(kafka):
    assert kafka.start_s is not None and kafka.start_s < 120
    for port in kafka.ports:
        brokers, controller = metadata(port)
        assert brokers == [1, 2, 3]
        assert controller in (1, 2, 3)
    properties = kafka.properties(1)
    assert properties["process.roles"] == "broker,controller"
    assert properties["min.insync.replicas"] == "2"


def test_kafka_tools_against_kafka_itself(kafka):
    done = tool(kafka, TOPICS, "--create", "--topic", "jk", "--partitions", "2")
    assert done.stdout.strip() == "Created topic jk."
    topic, partitions = described(tool(kafka, TOPICS, "--describe", "--topic", "jk").stdout)
    assert (topic["PartitionCount"], topic["ReplicationFactor"]) == ("2", "3"), topic
    assert all(sorted(p["Replicas"].split(",")) == ["1", "2", "3"] for p in partitions)

    sent = [(f"user-{i % 4}", f"event-{i}") for i in range(20)]
    tool(
        kafka,
        *(CONSOLE_PRODUCER, "--topic", "jk", "--reader-property", "parse.key=true"),
        input="".join(f"{k}\t{v}\n" for k, v in sent),
    )
    started = time.monotonic()
    done = tool(
        kafka,
        *(CONSOLE_CONSUMER, "--topic", "jk", "--from-beginning", "--max-messages", "20"),
        *("--timeout-ms", "30000", "--group", "jk-g"),
        *("--formatter-property", "print.key=true"),
    )
    got = [tuple(line.split("\t")) for line in done.stdout.splitlines()]
    assert sorted(got) == sorted(sent), time.monotonic() - started

    rows = group_table(tool(kafka, CONSUMER_GROUPS, "--describe", "--group", "jk-g").stdout)
    assert sorted(r["PARTITION"] for r in rows) == ["0", "1"], rows
    assert sum(int(r["CURRENT-OFFSET"]) for r in rows) == 20  # Kafka's offsets have no holes
    assert all(r["LAG"] == "0" for r in rows), rows
    reset = ("--reset-offsets", "--to-earliest", "--group", "jk-g", "--topic", "jk", "--execute")
    executed = group_table(tool(kafka, CONSUMER_GROUPS, *reset).stdout)
    assert [r["NEW-OFFSET"] for r in executed] == ["0", "0"], executed
    rows = group_table(tool(kafka, CONSUMER_GROUPS, "--describe", "--group", "jk-g").stdout)
    assert sum(int(r["LAG"]) for r in rows) == 20, rows


def test_kafka_answers_the_consumer_protocol_as_quorumlogs_test_recorded(kafka):
    """tests/process/test_kafka_consumer_protocol.py holds Kafka 4.4's answers to its
    hand-driven consumer group protocol (KIP-848) and checks quorumlog's against them:
    here the same requests go to Kafka itself, so the record stays Kafka's."""
    tool(kafka, TOPICS, "--create", "--topic", "kip848", "--partitions", "4")
    answers = reconciliation(kafka.bootstrap, "kip848", "kip848")
    assert answers == KAFKA_44_RECONCILIATION
