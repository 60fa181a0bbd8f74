"""`quorumlog dev` beside another one, with a node that cannot start, and on Ctrl-C: real
processes (issue 44)."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from quorumlog.cli.localcluster import QUORUMLOG, free_ports
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError
from tests.serving import deaf_to_ctrl_c, serve_pids

NODES = 3


def _bases() -> list[int]:
    """--base-port, --kafka-base-port, --http-base-port: free and not overlapping."""
    bases = free_ports(3)
    while any(abs(a - b) < NODES for a, b in itertools.combinations(bases, 2)):
        bases = free_ports(3)
    return bases


def _dev(data: Path, bases: list[int], **popen) -> subprocess.Popen:
    base, kafka_base, http_base = bases
    args = [*QUORUMLOG, "dev", "--data", str(data), "--base-port", str(base)]
    args += ["--kafka-base-port", str(kafka_base), "--http-base-port", str(http_base)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def _wait_leader(base: int, within_s: float = 60.0) -> None:
    brokers = ",".join(f"127.0.0.1:{base + i}" for i in range(NODES))
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with Client(brokers, timeout=2.0) as client:
                statuses = client.status()
            if sum(s.get("role") == "leader" for s in statuses) == 1 and all(
                "role" in s for s in statuses
            ):
                return
        except QuorumLogError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no leader on {brokers} within {within_s} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _one_line_exit_1(proc: subprocess.Popen, within_s: float) -> str:
    started = time.monotonic()
    try:
        _, err = proc.communicate(timeout=within_s + 15)  # past the bound: to say by how much
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {within_s + 15} s") from None
    took_s = time.monotonic() - started
    lines = err.decode().splitlines()
    assert proc.returncode == 1, lines
    assert len(lines) == 1, lines
    assert took_s < within_s, (took_s, lines)
    return lines[0]


def test_a_second_dev_beside_a_running_one_exits_1_at_once_naming_the_port(tmp_path):
    bases = _bases()
    first = _dev(tmp_path / "first", bases)
    second = third = None
    try:
        _wait_leader(bases[0])
        second = _dev(tmp_path / "second", bases)  # the same ports
        line = _one_line_exit_1(second, within_s=5.0)
        assert f"port {bases[0]} " in line, line
        assert f"another quorumlog dev (pid {first.pid}, data in {tmp_path / 'first'})" in line
        assert not (tmp_path / "second").exists(), "it started something"

        third = _dev(tmp_path / "first", _bases())  # the same data, other ports
        line = _one_line_exit_1(third, within_s=5.0)
        assert f"--data {tmp_path / 'first'} is in use by another quorumlog dev" in line, line
        assert len(serve_pids(str(tmp_path / "first"))) == NODES
    finally:
        for proc in (first, second, third):
            if proc is not None:
                _stop(proc)
    assert first.returncode == 0, first.stderr.read().decode()


def test_a_port_held_by_something_else_is_named_before_anything_starts(tmp_path):
    bases = _bases()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", bases[1] + 2))  # node 3's Kafka port
        busy.listen()
        proc = _dev(tmp_path / "dev", bases)
        try:
            line = _one_line_exit_1(proc, within_s=5.0)
        finally:
            _stop(proc)
    assert f"port {bases[1] + 2} (--kafka-base-port, node 3) is in use by pid {os.getpid()}" in line
    assert not (tmp_path / "dev").exists()


def test_a_node_that_cannot_start_ends_dev_with_its_log_and_why(tmp_path):
    (tmp_path / "node2").write_text("")  # where node 2's data folder would be
    proc = _dev(tmp_path, _bases())
    try:
        line = _one_line_exit_1(proc, within_s=60.0)
    finally:
        _stop(proc)
    log = tmp_path / "node2.log"
    last = log.read_text().strip().splitlines()[-1]
    assert line == f"quorumlog: node 2 exited with 2: {log}: {last}"
    assert "is a file" in last, last
    assert not serve_pids(str(tmp_path)), "dev left nodes running"


# Alone: in a pytest worker that had run other tests, dev once never heard its Ctrl-C (as
# if it inherited SIGINT ignored or blocked; `deaf_to_ctrl_c` says so if it recurs).
@pytest.mark.alone
def test_ctrl_c_stops_every_node_cleanly_none_aborted(tmp_path):
    """The terminal sends Ctrl-C's SIGINT to the whole foreground process group: to `dev`
    and, unless they have a group of their own, its nodes, which dev then also SIGTERMs."""
    bases = _bases()
    proc = _dev(tmp_path, bases, start_new_session=True)  # a group, as a shell's job
    try:
        _wait_leader(bases[0])
        assert deaf_to_ctrl_c(proc.pid) is None, deaf_to_ctrl_c(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
    finally:
        _stop(proc)
    assert not serve_pids(str(tmp_path)), "dev left nodes running"
    for node_id in range(1, NODES + 1):
        lines = (tmp_path / f"node{node_id}.log").read_text().strip().splitlines()
        assert "aborted" not in lines[-1], (node_id, lines[-5:])
        assert " stopped " in lines[-1], (node_id, lines[-5:])


def test_help_says_where_the_data_is_and_how_to_start_afresh():
    out = subprocess.run([*QUORUMLOG, "dev", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "./quorumlog-dev by default" in text, text
    assert "to start afresh, stop dev and delete that folder" in text, text
