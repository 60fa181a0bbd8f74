"""A real Kafka Connect 4.4 worker in distributed mode against three quorumlog nodes: its
three internal topics are compacted (Connect checks that the config topic is), a
FileStreamSource connector made over its REST API copies a file's lines into a topic, and
the worker, stopped and started again, goes on from the offsets it stored: no line is
copied twice. Needs java 17+ and Kafka's jars (fetched from Maven by `make test`);
skipped, saying why, without them."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from quorumlog.bench import kafka_java
from quorumlog.cli.localcluster import free_ports
from tests.process.kafka_support import compile_java, kafka_cluster
from tests.process.test_topics import wait_until

WORKER = "org.apache.kafka.connect.cli.ConnectDistributed"
INTERNAL = ("connect-offsets", "connect-configs", "connect-status")
SHIM = Path(__file__).parent / "java" / "shim" / "org/apache/kafka/common/utils/AppInfoParser.java"


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    """connect-file 4.3.1's one call into a class 4.4 moved (see the shim's source)."""
    return compile_java(SHIM, tmp_path_factory.mktemp("shim"), "Kafka Connect")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, shim):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("connect")))


class Worker:
    def __init__(self, bootstrap: str, folder: Path, shim: Path):
        (self.port,) = free_ports(1)
        settings = folder / "worker.properties"
        settings.write_text(
            "\n".join(
                [
                    f"bootstrap.servers={bootstrap}",
                    "group.id=connect-cluster",
                    "key.converter=org.apache.kafka.connect.storage.StringConverter",
                    "value.converter=org.apache.kafka.connect.storage.StringConverter",
                    "offset.storage.topic=connect-offsets",
                    "config.storage.topic=connect-configs",
                    "status.storage.topic=connect-status",
                    "offset.storage.replication.factor=3",
                    "config.storage.replication.factor=3",
                    "status.storage.replication.factor=3",
                    "offset.flush.interval.ms=500",
                    # Plugins from their ServiceLoader manifests, without scanning every
                    # class of Kafka's jars by reflection (what `hybrid_warn` does first).
                    "plugin.discovery=service_load",
                    f"listeners=http://127.0.0.1:{self.port}",
                    "",
                ]
            )
        )
        jvm = ("-Xmx512m", *kafka_java.TOOL_JVM[1:])  # a tool's quick compiler and GC
        command = kafka_java.java_command(WORKER, [str(settings)], jvm=jvm)
        at = command.index("-cp")
        command[at + 1] = f"{shim}:{command[at + 1]}"
        self.log = folder / "worker.log"
        self.proc = subprocess.Popen(command, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def serving(self) -> bool:
        assert self.proc.poll() is None, f"the worker exited: see {self.log}"
        try:
            return self.call("GET", "/connectors")[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)  # as Ctrl-C: it stores its offsets and leaves
        self.proc.wait(timeout=60)


def copied(cluster, topic: str) -> list[bytes]:
    with cluster.client(timeout=20) as client:
        if topic not in client.topics():
            return []
        end = client.end_offset(topic=topic)
        out: list[bytes] = []
        offset = client.start_offset(topic)
        while offset <= end:
            records = client.read(offset, max_records=1000, topic=topic)
            if not records:
                break
            out += [r.value for r in records]
            offset = records[-1].offset + 1
        return out


@pytest.mark.slow
def test_a_distributed_worker_copies_a_file_once_across_a_restart(cluster, shim, tmp_path):
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"line {i}\n" for i in range(100)))
    with cluster.client(timeout=20) as client:
        client.create_topic("lines")  # the connector's (Kafka's brokers would make it)
    worker = Worker(cluster.kafka_bootstrap, tmp_path, shim)
    try:
        wait_until(worker.serving, 120, f"the worker serves its REST API (its log: {worker.log})")
        with cluster.client(timeout=20) as client:
            wait_until(lambda: set(INTERNAL) <= set(client.topics()), 60, "its three topics")
            for topic in INTERNAL:
                (row, *_) = client.describe_topic(topic)
                assert row["cleanup_policy"] == "compact", topic
        status, answer = worker.call(
            "POST",
            "/connectors",
            {
                "name": "file-source",
                "config": {
                    "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                    "tasks.max": "1",
                    "file": str(source),
                    "topic": "lines",
                },
            },
        )
        assert status == 201, answer
        wait_until(lambda: len(copied(cluster, "lines")) >= 100, 90, "the first 100 lines")
    finally:
        worker.stop()
    with source.open("a") as f:
        f.write("".join(f"line {i}\n" for i in range(100, 150)))
    worker = Worker(cluster.kafka_bootstrap, tmp_path, shim)
    try:
        wait_until(worker.serving, 120, f"the worker serves again (its log: {worker.log})")
        wait_until(lambda: len(copied(cluster, "lines")) >= 150, 90, "the next 50 lines")
        time.sleep(2)  # a copy twice would come now
        assert copied(cluster, "lines") == [b"line %d" % i for i in range(150)]
    finally:
        worker.stop()
