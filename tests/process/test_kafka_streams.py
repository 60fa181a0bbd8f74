"""A real Kafka Streams 4.4 application against three quorumlog nodes: a word count whose
KTable's state store is backed by a compacted changelog topic, which the nodes' cleaners
compact meanwhile. Killed and restarted with its local state deleted, it restores the
counts from the compacted changelog and goes on from them. With exactly_once_v2 (Kafka's
transactions), killed again and again while its input arrives, it counts every input
once.
Needs java 17+ and Kafka's jars (fetched from Maven by `make test`); skipped, saying why,
without them."""

from __future__ import annotations

import collections
import os
import shutil
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from quorumlog.bench import kafka_java
from tests.process.kafka_support import compile_java, kafka_cluster
from tests.process.test_topics import wait_until

SOURCE = Path(__file__).parent / "java" / "WordCount.java"
WORDS = ["raft", "log", "quorum", "kafka", "stream", "table"]


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> Path:
    return compile_java(SOURCE, tmp_path_factory.mktemp("classes"), "Kafka Streams")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, classes):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("streams")))


class App:
    """The word count, running; its output lines kept (STATE changes)."""

    def __init__(
        self,
        classes: Path,
        bootstrap: str,
        state_dir: Path,
        log: Path,
        app_id: str = "wordcount",
        guarantee: str = "at_least_once",
        topics: tuple[str, str] = ("wc-input", "wc-output"),
    ):
        args = [bootstrap, app_id, str(state_dir), guarantee, *topics]
        command = kafka_java.java_command("WordCount", args)
        at = command.index("-cp")
        command[at + 1] = f"{classes}:{command[at + 1]}"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log.open("ab"), text=True
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def running(self) -> bool:
        assert self.proc.poll() is None, f"the application exited: {self.lines[-5:]}"
        return "STATE RUNNING" in self.lines

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def produce(bootstrap: str, lines: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, line in enumerate(lines):
        producer.produce("wc-input", key=b"%d" % i, value=line.encode())
    assert producer.flush(30) == 0


def changelog_cleaned(cluster) -> bool:
    with cluster.client(timeout=20) as client:
        (row, *_) = client.describe_topic("wordcount-counts-changelog")
    return bool(row.get("cleaner", {}).get("bytes_reclaimed"))


def counts_read(
    bootstrap: str,
    expected: dict[str, int],
    timeout_s: float,
    topic: str = "wc-output",
    seen: dict[str, list[int]] | None = None,
) -> dict[str, int]:
    """The latest count of each word in `topic`, read (read_committed) until they are
    `expected`; every count read goes to `seen`, by word."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    latest: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while latest != expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            word, count = message.key().decode(), struct.unpack(">q", message.value())[0]
            latest[word] = count
            if seen is not None:
                seen.setdefault(word, []).append(count)
    finally:
        consumer.close()
    return latest


@pytest.mark.slow
def test_a_word_count_resumes_its_counts_from_its_compacted_changelog(cluster, classes, tmp_path):
    with cluster.client(timeout=20) as client:
        client.create_topic("wc-input", partitions=2)
        client.create_topic("wc-output", partitions=2)
    bootstrap = cluster.kafka_bootstrap
    state = tmp_path / "state"
    log = tmp_path / "app.log"
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 4 + 1)) for i in range(60)]
    expected = collections.Counter(w for line in lines[:40] for w in line.split())

    app = App(classes, bootstrap, state, log)
    try:
        wait_until(app.running, 90, f"the application runs (its log: {log})")
        for start in range(0, 40, 10):  # apart: the changelog's segments close between them
            produce(bootstrap, lines[start : start + 10])
            time.sleep(0.3)
        assert counts_read(bootstrap, dict(expected), 60) == dict(expected)
        wait_until(lambda: changelog_cleaned(cluster), 30, "a cleaner compacts the changelog")
        # At least once: what it processed after its last commit it would process again.
        # Its commits come every 200 ms; killed after a few, it has nothing to do again.
        time.sleep(2)
    finally:
        app.kill()
    with cluster.client(timeout=20) as client:
        changelogs = [t for t in client.topics() if t.endswith("-changelog")]
        assert changelogs == ["wordcount-counts-changelog"], client.topics()
        (row, *_) = client.describe_topic(changelogs[0])
        assert row["cleanup_policy"] == "compact"

    shutil.rmtree(state)  # the counts can come back from the changelog only
    expected.update(w for line in lines[40:] for w in line.split())
    app = App(classes, bootstrap, state, log)
    try:
        wait_until(app.running, 90, f"the application runs again (its log: {log})")
        produce(bootstrap, lines[40:])
        assert counts_read(bootstrap, dict(expected), 60) == dict(expected)
    finally:
        app.kill()
    assert os.path.isdir(state), "the restarted application restored its store"


@pytest.mark.slow
def test_exactly_once_counts_every_input_once_across_kills(cluster, classes, tmp_path):
    """exactly_once_v2: each input's counts, its changelog and its input position are one
    transaction. Killed (SIGKILL) three times while its input keeps arriving, and started
    again on its state, it counts each input once: every word's counts in the committed
    output only ever rise, never repeat, and end at the true totals. (At least once, the
    same run counts again what it processed after its last commit: checked by hand.)"""
    with cluster.client(timeout=20) as client:
        client.create_topic("eos-input", partitions=2)
        client.create_topic("eos-output", partitions=2)
    bootstrap = cluster.kafka_bootstrap
    state, log = tmp_path / "state", tmp_path / "app.log"
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 3 + 1)) for i in range(600)]
    expected = collections.Counter(w for line in lines for w in line.split())
    done = threading.Event()

    def feed() -> None:  # all along: each kill lands while records are being processed
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i, line in enumerate(lines):
            producer.produce("eos-input", key=b"%d" % i, value=line.encode())
            if i % 5 == 4:
                producer.flush(30)
                time.sleep(0.05)
        producer.flush(30)
        done.set()

    def start() -> App:
        app = App(
            classes,
            bootstrap,
            state,
            log,
            app_id="eos-count",
            guarantee="exactly_once_v2",
            topics=("eos-input", "eos-output"),
        )
        wait_until(app.running, 90, f"the application runs (its log: {log})")
        return app

    app = start()
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        for _ in range(3):
            time.sleep(1.5)
            app.kill()
            app = start()
        feeder.join(120)
        assert done.is_set(), "the input was not all sent"
        seen: dict[str, list[int]] = {}
        final = counts_read(bootstrap, dict(expected), 90, topic="eos-output", seen=seen)
    finally:
        app.kill()
    assert final == dict(expected)
    for word, counts in seen.items():
        assert counts == sorted(set(counts)), f"{word}: a count repeated or went back: {counts}"
