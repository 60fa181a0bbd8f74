"""A cluster written by quorumlog 0.4, whose offsets were log positions (Raft's own batches
took offsets between the records), opens with today's release: its records read at
offsets that count them, a trim stays before the same record, and consumer groups resume
at the same records (tests/fixtures/make_data_v0_4.py made the data)."""

from __future__ import annotations

import json
import socket
import tarfile
import time
from pathlib import Path

import pytest

from quorumlog import Consumer, OffsetOutOfRangeError
from quorumlog.cli.localcluster import ProcessCluster

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "data-v0.4.tar.gz"
PORTS = [47301, 47302, 47303]  # the data directories name their peers at these


def free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the nodes listen
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def upgraded(tmp_path):
    if not all(free(p) for p in PORTS):
        pytest.skip(f"the 0.4 data directories need ports {PORTS}, which are in use")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    cluster = ProcessCluster(str(tmp_path), ports=PORTS)
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        yield cluster, json.loads((tmp_path / "written.json").read_text())
    finally:
        cluster.stop_all()


def values(records) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for r in records]


def test_data_of_0_4_reads_at_record_offsets_and_groups_resume_at_the_same_records(upgraded):
    cluster, written = upgraded
    # 0.4 gave d5 offset 7: a barrier at 0, another at 6 (the restart between d4 and d5).
    assert written["d"][0] == 1 and written["d"][5] == 7
    with cluster.client(timeout=30) as c:
        assert values(c.read(0, 100)) == [(i, b"d%d" % i) for i in range(10)]
        assert c.end_offset() == 9
        e = c.read(0, 100, topic="events", partition=0)
        assert values(e) == [(i, b"e%d" % i) for i in range(6)]
        assert values(c.read(0, 100, topic="events", partition=1)) == [
            (i, b"f%d" % i) for i in range(4)
        ]
        # Trimmed before l1 (0.4's position 2): l1 is still the first record readers get.
        with pytest.raises(OffsetOutOfRangeError):
            c.read(0, 100, topic="logs")
        assert values(c.read(1, 100, topic="logs")) == [(i, b"l%d" % i) for i in range(1, 4)]
        assert c.describe_topic("logs")[0]["log_start_offset"] == 1
        assert c.append([b"d10"]) == 10
    # billing committed after d6: it resumes at d7.
    with Consumer(
        cluster.brokers, group="billing", topics=["default"], start="earliest", timeout=30
    ) as billing:
        got = poll_until(billing, 4)
        assert values(got) == [(i, b"d%d" % i) for i in range(7, 11)]
    # jobs acked e0..e2: the rest is delivered, nothing acked comes back.
    with Consumer(
        cluster.brokers, group="jobs", topics=["events"], mode="queue", timeout=30
    ) as jobs:
        got = poll_until(jobs, 7)
        assert sorted((r.partition, r.offset, r.value) for r in got) == [
            *((0, i, b"e%d" % i) for i in range(3, 6)),
            *((1, i, b"f%d" % i) for i in range(4)),
        ]


def poll_until(consumer: Consumer, count: int, within_s: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + within_s
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(max_records=count - len(got), timeout=1.0)
    return got
