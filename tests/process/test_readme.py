"""Every Python block of the README runs as written, in order, against a real cluster (its
addresses put in place of 127.0.0.1:7001-7003 and the Kafka port 9092), each in a fresh
interpreter started outside the clone's folder, as a user's script would be."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.process.kafka_support import kafka_cluster

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[str]:
    with open(README) as f:
        return BLOCK.findall(f.read())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("readme")))


def test_the_readme_has_python_blocks():
    assert len(python_blocks()) >= 5


def test_every_python_block_of_the_readme_runs(cluster, tmp_path):
    places = {f"127.0.0.1:{7001 + i}": cluster.address(i + 1) for i in range(3)}
    places["127.0.0.1:9092"] = f"127.0.0.1:{cluster.kafka_ports[0]}"
    for number, block in enumerate(python_blocks(), 1):
        for written, real in places.items():
            block = block.replace(written, real)
        if number == 2:  # the first block made and deleted `events`; the rest read it
            with cluster.client(timeout=60) as c:
                c.create_topic("events", partitions=6, replicas=3)
                c.create_topic("jobs", partitions=2, replicas=3)
                c.append([b"signed up"], topic="events")
                c.append([b"mail 1", b"mail 2"], topic="jobs")
        ran = subprocess.run(
            [sys.executable, "-c", block],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, f"README block {number}:\n{block}\n{ran.stderr[-3000:]}"
