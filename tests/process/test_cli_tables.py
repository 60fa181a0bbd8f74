"""The command line's tables as people and scripts read them (issue 44): one meaning of
"end" (the offset of the last record) in `topic describe` and `group describe`, a header
row on a terminal and never in a pipe, one message when no broker is given."""

from __future__ import annotations

import json
import os
import pty
import subprocess

import pytest

from quorumlog import Consumer, Record
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster

HEADERS = {  # command after `-b BROKERS`, its header row
    ("topic", "list"): "NAME PARTITIONS REPLICAS",
    ("topic", "describe", "t44"): "PARTITION LEADER REPLICAS COMMIT_OFFSET",
    ("group", "list"): "GROUP MODE MEMBERS",
    ("group", "describe", "g44"): "TOPIC PARTITION COMMITTED END LAG OWNER",
    ("members", "list"): "ID HOST:PORT ROLE",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = ProcessCluster(str(tmp_path_factory.mktemp("tables")), size=1)
    c.start_all()
    yield c
    c.stop_all()


def ql(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "QUORUMLOG_BROKERS"}
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=60, env=env)


def on_a_terminal(*args: str) -> list[str]:
    """The lines a command prints with a pseudo-terminal as its stdout."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*QUORUMLOG, *args], stdout=follower, stderr=subprocess.PIPE)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command ended and closed its side
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    return out.decode().replace("\r\n", "\n").splitlines()


@pytest.fixture(scope="module")
def consumed(cluster):
    """Topic t44 (2 partitions) whose records group g44 has read and committed, all of
    them in partition 0 and none yet in partition 1 (empty)."""
    created = ql("topic", "-b", cluster.brokers, "create", "t44", "--partitions", "2")
    assert created.returncode == 0, created.stderr
    with cluster.client(timeout=30) as c:
        c.append([Record(b"r%d" % i) for i in range(5)], topic="t44", partition=0)
    with Consumer(cluster.brokers, "g44", ["t44"], timeout=30) as consumer:
        got = 0
        for _ in range(50):
            got += len(consumer.poll(100, 0.5))
            if got == 5:
                break
        consumer.commit()
    return created


def test_created_topic_says_partition_in_the_singular_for_one(cluster, consumed):
    assert consumed.stdout.decode() == "created t44: 2 partitions\n"
    one = ql("topic", "-b", cluster.brokers, "create", "t44-one")
    assert one.returncode == 0, one.stderr
    assert one.stdout.decode() == "created t44-one: 1 partition\n"


def test_group_describe_end_is_the_last_offset_as_topic_describe_shows(cluster, consumed):
    b = ("-b", cluster.brokers)
    topic = [
        line.split() for line in ql("topic", *b, "describe", "t44").stdout.decode().splitlines()
    ]
    commit = {int(f[0]): int(f[3]) for f in topic if len(f) == 4}
    assert commit == {0: 4, 1: -1}
    group = [
        line.split() for line in ql("group", *b, "describe", "g44").stdout.decode().splitlines()
    ]
    # TOPIC PARTITION COMMITTED END LAG OWNER
    assert [f[:5] for f in group] == [["t44", "0", "5", "4", "0"], ["t44", "1", "0", "-1", "0"]]
    rows = [
        json.loads(line)
        for line in ql("group", *b, "describe", "g44", "--json").stdout.splitlines()
    ]
    for r in rows:
        assert r["end"] == commit[r["partition"]], r
        assert (
            r["next_offset"] == r["end"] + 1 and r["lag"] == r["next_offset"] - r["committed"] == 0
        )


def table(lines: list[str]) -> list[list[str]]:
    """A table's rows as fields (`topic describe`'s NAME=VALUE settings left out)."""
    return [line.split() for line in lines if line and "=" not in line]


@pytest.mark.parametrize("command", list(HEADERS), ids=[" ".join(c) for c in HEADERS])
def test_a_header_row_on_a_terminal_and_none_in_a_pipe(cluster, consumed, command):
    name, *rest = command
    args = (name, "-b", cluster.brokers, *rest)
    header = HEADERS[command].split()
    shown = on_a_terminal(*args)
    assert shown[0].split() == header, shown
    piped = ql(*args).stdout.decode().splitlines()
    assert piped and all(line.split() != header for line in piped), piped
    assert table(shown[1:]) == table(piped), "the same rows, the same fields"
    assert on_a_terminal(*args, "--no-header")[0].split() != header
    assert ql(*args, "--header").stdout.decode().splitlines()[0].split() == header
    json_lines = ql(*args, "--json").stdout.decode().splitlines()
    assert all(json.loads(line) for line in json_lines), "--json has no header"


@pytest.mark.parametrize(
    "args", [("status",), ("produce",), ("topic", "list"), ("group", "describe", "g")]
)
def test_missing_brokers_is_one_message_naming_the_environment_variable(args):
    out = ql(*args)
    assert out.returncode == 2
    assert (
        out.stderr.decode()
        == "quorumlog: give the brokers with -b/--brokers or QUORUMLOG_BROKERS\n"
    )
    helped = ql(*args, "--help").stdout.decode()
    assert "QUORUMLOG_BROKERS" in helped and "[required]" not in helped
