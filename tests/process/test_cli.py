"""Every CLI command against a real cluster, as a user runs it."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster, free_ports
from tests.serving import deaf_to_ctrl_c, serve_pids


def ql(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], input=input, capture_output=True, timeout=timeout)


# Each test marked so reads back what it wrote, at the offsets it was given or in a topic
# of its own, and stops no node: one cluster serves them all.
@pytest.mark.shares_cluster
def test_produce_then_consume(cluster):
    cluster.wait_for_leader()
    b = ["-b", cluster.brokers]
    assert ql("topic", *b, "create", "greek").returncode == 0  # its own: `earliest` is its start
    out = ql("produce", *b, "--topic", "greek", input=b"alpha\nbeta\ngamma\n")
    assert out.returncode == 0, out.stderr
    first, last = map(int, out.stdout.split())
    assert last == first + 2
    out = ql("consume", *b, "--topic", "greek", "--from", str(first), "--with-offsets")
    assert out.returncode == 0
    assert out.stdout.decode().splitlines() == [
        f"{first}\talpha",
        f"{first + 1}\tbeta",
        f"{last}\tgamma",
    ]
    out = ql("consume", *b, "--topic", "greek", "--from", "earliest", "--max", "2")
    assert out.stdout.splitlines() == [b"alpha", b"beta"]
    assert ql("consume", *b, "--topic", "greek", "--from", "latest").stdout == b""
    assert ql("consume", *b, "--topic", "greek", "--from", str(last + 1000)).stdout == b""


@pytest.mark.shares_cluster
def test_produce_from_a_file_with_each_acks_level(cluster, tmp_path):
    cluster.wait_for_leader()
    source = tmp_path / "in.txt"
    source.write_bytes(b"".join(b"line-%d\n" % i for i in range(25_000)))
    # A topic of its own: the unacknowledged records may land after the test, not in default.
    b = ["-b", cluster.brokers, "--topic", "from-file"]
    assert ql("topic", "-b", cluster.brokers, "create", "from-file").returncode == 0
    for acks in ("quorum", "leader"):
        out = ql("produce", *b, "--acks", acks, str(source))
        first, last = map(int, out.stdout.split())
        assert last - first >= 24_999
    out = ql("produce", *b, "--acks", "none", str(source))
    assert out.returncode == 0 and out.stdout == b""


def test_status_and_members(cluster):
    leader = cluster.wait_for_leader()
    out = ql("status", "-b", cluster.address(1), "--json")
    assert out.returncode == 0
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [s["node_id"] for s in lines] == [1, 2, 3]
    keys = {
        "node_id",
        "role",
        "term",
        "leader_id",
        "commit_offset",
        "dirty_offset",
        "flushed_offset",
        "log_start_offset",
        "config",
    }
    assert all(keys <= set(s) for s in lines)
    assert [s["role"] for s in lines].count("leader") == 1
    assert "followers" in lines[leader - 1]
    assert lines[0]["config"] == {
        "voters": [1, 2, 3],
        "learners": [],
        "joint": None,
        "witnesses": [],
        "log_only": [],
    }
    out = ql("members", "-b", cluster.brokers, "list")
    assert out.stdout.decode().splitlines() == [
        f"{i} {cluster.address(i)} voter" for i in (1, 2, 3)
    ]
    cluster.kill(3)
    out = ql("status", "-b", cluster.address(1), "--json")
    assert out.returncode == 0
    assert json.loads(out.stdout.splitlines()[2]) == {"node_id": 3, "error": "unreachable"}


@pytest.mark.shares_cluster
def test_errors_are_one_line_and_exit_codes_hold(cluster):
    cluster.wait_for_leader()
    (dead,) = free_ports(1)
    out = ql("consume", "-b", f"127.0.0.1:{dead}", "--timeout", "1")
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1 and b"Traceback" not in out.stderr
    assert ql("consume", "-b", cluster.brokers, "--from", "-3").returncode == 1
    assert ql("produce", "-b", cluster.brokers, input=b"").returncode == 1
    assert ql("consume", "-b", cluster.brokers, "--from", "nowhere").returncode == 2
    assert ql("produce").returncode == 2
    out = ql("status", "-b", cluster.brokers, "--secret-file", "/nonexistent")
    assert out.returncode == 2


def test_help_explains_every_command_with_an_example():
    for command in ("serve", "dev", "demo", "produce", "consume", "status", "bench"):
        out = ql(command, "--help")
        assert out.returncode == 0
        assert b"Example" in out.stdout, command


@pytest.mark.slow
def test_demo_passes():
    out = ql("demo", timeout=240)
    assert out.returncode == 0, out.stdout.decode()[-3000:]
    assert b"FAILED" not in out.stdout


# Alone: see tests/process/test_dev.py, test_ctrl_c_stops_every_node_cleanly_none_aborted.
@pytest.mark.alone
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_dev_runs_a_cluster_and_stops_it_on_ctrl_c_or_sigterm(tmp_path, stop):
    bases = free_ports(3)
    while any(abs(a - b) < 3 for a, b in itertools.combinations(bases, 2)):
        bases = free_ports(3)  # dev refuses ranges that overlap
    base, kafka_base, http_base = bases
    proc = subprocess.Popen(
        [
            *QUORUMLOG,
            "dev",
            "--data",
            str(tmp_path),
            "--base-port",
            str(base),
            "--kafka-base-port",
            str(kafka_base),
            "--http-base-port",
            str(http_base),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        cluster = ProcessCluster(str(tmp_path), ports=[base, base + 1, base + 2])
        cluster.procs = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = ql("produce", "-b", cluster.brokers, "--timeout", "2", input=b"hello\n")
            if out.returncode == 0:
                break
        assert out.returncode == 0, out.stderr
        wanted = [f"127.0.0.1:{kafka_base + i}" for i in range(3)]

        def kafka_addresses() -> list:
            out = ql("status", "-b", cluster.brokers, "--json", "--timeout", "2")
            lines = [json.loads(line) for line in out.stdout.splitlines()]
            return sorted(str(s.get("kafka_address")) for s in lines)  # a member may lag

        while kafka_addresses() != wanted:
            assert time.monotonic() < deadline + 30, kafka_addresses()
        for node in range(3):  # each node's console, which writes (trying things out)
            page = urllib.request.urlopen(f"http://127.0.0.1:{http_base + node}/topics/default")
            assert b"Produce a record" in page.read()
    finally:
        deaf = deaf_to_ctrl_c(proc.pid) if stop == signal.SIGINT else None
        proc.send_signal(stop)
        assert proc.wait(timeout=30) == 0, deaf
    assert f"http://127.0.0.1:{http_base}/".encode() in proc.stdout.read()
    assert not serve_pids(str(tmp_path)), "dev left nodes running"
    assert sorted(p.name for p in tmp_path.glob("node*.log")) == [
        "node1.log",
        "node2.log",
        "node3.log",
    ]


DEAD = "127.0.0.1:1"  # nothing listens there (below the ports tests take)
BAD_INPUT = [  # (arguments, exit code): every subcommand, each wrong in its own way
    (("produce", "-b", "x"), 2),
    (("produce", "-b", DEAD, "/no/such/file"), 2),
    (("produce", "-b", DEAD, "--acks", "all-of-them"), 2),
    (("consume", "-b", DEAD, "--from", "soon"), 2),
    (("consume", "-b", DEAD, "--partition", "-1"), 2),
    (("consume", "-b", DEAD), 1),
    (("status", "-b", DEAD, "extra"), 2),
    (("status", "-b", DEAD), 1),
    (("topic", "-b", DEAD, "create", "t", "--partitions", "zero"), 2),
    (("topic", "-b", DEAD, "describe"), 2),
    (("topic", "-b", DEAD, "list"), 1),
    (("group", "-b", DEAD, "reset-offsets", "g", "--topic", "t", "--to", "never"), 2),
    (("group", "-b", DEAD, "describe"), 2),
    (("group", "-b", DEAD, "list"), 1),
    (("members", "-b", DEAD, "add", "x", "y"), 2),
    (("members", "-b", DEAD, "list"), 1),
    (("transfer-leader", "-b", DEAD, "x"), 2),
    (("transfer-leader", "-b", DEAD, "2"), 1),
    (("serve", "--id", "x"), 2),
    (("serve", "--id", "1", "--data", "/tmp/ql-no-such-dir", "--listen", "127.0.0.1"), 2),
    (("serve", "--id", "1", "--data", "/tmp/ql-no-such-dir", "--listen", "127.0.0.1:9"), 2),
    (("unsafe-recover", "--members", "1=a"), 2),
    (("unsafe-recover", "--data", "/tmp/ql-no-such-dir", "--inspect"), 2),
    (("dev", "--nodes", "99"), 2),
    (("bench", "nope"), 2),
]


@pytest.mark.parametrize(("args", "code"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_every_subcommand_given_bad_input_says_so_in_one_line(args, code):
    out = ql(*args, input=b"")
    lines = out.stderr.decode().strip().splitlines()
    assert out.returncode == code, lines
    assert len(lines) == 1 and lines[0].startswith("quorumlog"), lines
    assert not os.path.exists("/tmp/ql-no-such-dir"), "nothing written"


def test_brokers_where_nothing_listens_fail_at_once_not_at_the_timeout():
    brokers = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    for args in (("status",), ("produce",), ("topic", "list")):
        out = ql(*args[:1], "-b", brokers, "--timeout", "600", *args[1:], input=b"x\n")
        lines = out.stderr.decode().strip().splitlines()
        assert out.returncode == 1 and len(lines) == 1, lines
        assert "no quorumlog node listens at any broker" in lines[0], lines


def test_a_broker_that_speaks_another_protocol_is_named_in_one_line():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"

        def answer_http() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return  # closed: the test is over
                with conn:
                    conn.recv(64)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        threading.Thread(target=answer_http, daemon=True).start()
        out = ql("status", "-b", address, "--timeout", "600")
    lines = out.stderr.decode().strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, lines
    assert f"{address} is not a quorumlog node" in lines[0], lines


def test_status_check_is_a_health_check(cluster):
    cluster.wait_for_leader()
    with cluster.client(timeout=30) as c:
        c.create_topic("checked", partitions=3, replicas=3)
    healthy = ql("status", "-b", cluster.brokers, "--check")
    assert healthy.returncode == 0, healthy.stderr
    cluster.kill(3)
    plain = ql("status", "-b", cluster.brokers, "--timeout", "3")
    assert plain.returncode == 0, "plain status reports, it does not judge"
    sick = ql("status", "-b", cluster.brokers, "--check", "--json", "--timeout", "3")
    lines = sick.stderr.decode().strip().splitlines()
    assert sick.returncode == 1 and lines == ["quorumlog: not healthy: node 3 did not answer"]
    assert len(sick.stdout.splitlines()) == 3, "the statuses are printed all the same"


@pytest.mark.shares_cluster
def test_acks_all_and_consume_past_the_end(cluster):
    cluster.wait_for_leader()
    lines = b"".join(b"line-%d\n" % i for i in range(10))
    produced = ql("produce", "-b", cluster.brokers, "--acks", "all", input=lines)
    assert produced.returncode == 0, produced
    first, last = map(int, produced.stdout.split())  # default may hold others' records
    assert last == first + 9, produced
    past = ql("consume", "-b", cluster.brokers, "--from", str(last + 1000))
    assert past.returncode == 0 and past.stdout == b""
    assert past.stderr.decode().strip() == (
        f"default/0 ends at offset {last}: nothing at {last + 1000} yet (--follow waits for it)"
    )


@pytest.mark.shares_cluster
def test_a_huge_record_and_a_wrong_secret_are_clear_errors(cluster, tmp_path):
    cluster.wait_for_leader()
    out = ql("produce", "-b", cluster.brokers, input=b"x" * (100 * 1024 * 1024) + b"\n")
    assert out.returncode == 1
    assert b"exceeds the maximum" in out.stderr and b"Traceback" not in out.stderr
    secret = tmp_path / "secret"
    secret.write_text("not-the-clusters")
    out = ql("status", "-b", cluster.brokers, "--secret-file", str(secret))
    assert out.returncode == 1
    assert b"secret" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_bad_usage_is_one_line_naming_the_flag_and_exits_2():
    for args, named in [
        (("status",), "--brokers"),
        (("status", "-b", "127.0.0.1"), "--brokers"),
        (("topic", "-b", "127.0.0.1:1,nohost", "list"), "--brokers"),
        (("status", "-b", "127.0.0.1:1", "--timeout", "soon"), "--timeout"),
        (("produce", "-b", "127.0.0.1:1", "--acks", "most"), "--acks"),
        (("consume", "--bogus"), "--bogus"),
        (("dev", "--base-port", "7001", "--kafka-base-port", "7002"), "--kafka-base-port"),
        (("dev", "--kafka-base-port", "9092", "--http-base-port", "9090"), "--http-base-port"),
    ]:
        out = ql(*args)
        lines = out.stderr.decode().strip().splitlines()
        assert out.returncode == 2, args
        assert len(lines) == 1 and named in lines[0], lines
    out = ql("--version")
    assert out.returncode == 0 and out.stdout.startswith(b"quorumlog ")
