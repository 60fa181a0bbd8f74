"""What the Kafka process tests share: a 3-node cluster with Kafka listeners."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quorumlog.bench import kafka_java
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from tests.process.test_topics import wait_until


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def kafka_cluster(
    root: str,
    env: dict[str, str] | None = None,
    http: bool = False,
    ready: Callable[[ProcessCluster, int], bool] | None = None,
) -> Iterator[ProcessCluster]:
    """A started 3-node cluster whose Kafka listeners accept connections, or are `ready`
    as it says (`env`: more of the nodes' environment; `http`: consoles too); stopped
    after, and its logs checked for bugs. For a fixture: `yield from ...`."""
    ports = {"http_ports": free_ports(3)} if http else {}
    c = ProcessCluster(root, kafka_ports=free_ports(3), env=env or {}, **ports)
    ready = ready or (lambda cluster, i: listening(cluster.kafka_ports[i - 1]))
    c.start_all()
    try:
        c.wait_for_leader()
        wait_until(lambda: all(ready(c, i) for i in c.ids), 30, "Kafka listeners")
        yield c
    finally:
        c.stop_all()
    assert_no_kafka_bugs(c)


def assert_no_kafka_bugs(cluster: ProcessCluster) -> None:
    """No Kafka connection or handler failed on a bug (bad bytes are not one) on any node."""
    for node_id in cluster.ids:
        with open(os.path.join(cluster.root, f"node{node_id}.log")) as log:
            text = log.read()
        assert "kafka_connection_failed" not in text, f"node {node_id}"
        assert "kafka_handler_failed" not in text, f"node {node_id}"


def compile_java(source: Path, out: Path, program: str) -> Path:
    """`source` compiled against Kafka's jars into `out`, for a test of `program` (Kafka
    Streams, Connect): skips the test, saying why, without a JDK or the jars."""
    why = kafka_java.why_unavailable()
    if why is None and shutil.which("javac") is None:
        why = "javac is not installed (a JDK's, 17 or later)"
    if why is not None:
        pytest.skip(f"{program} is not available: {why}")
    lib = f"{kafka_java.lib_dir()}/*"
    done = subprocess.run(
        ["javac", "-cp", lib, "-d", str(out), str(source)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return out
