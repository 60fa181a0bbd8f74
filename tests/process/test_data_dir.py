"""A data directory belongs to one process and one node: a second `serve` on it, or a
node started on another's directory, exits 1 with one line before it touches anything."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster, free_ports


def _serve(data_dir: str, node_id: int, peers: str | None = None) -> subprocess.CompletedProcess:
    args = [*QUORUMLOG, "serve", "--id", str(node_id), "--data", data_dir]
    args += ["--listen", f"127.0.0.1:{free_ports(1)[0]}"]
    if peers:
        args += ["--peers", peers]
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


def _cluster_id(cluster: ProcessCluster, node_id: int, timeout_s: float = 30.0) -> str:
    """The id node `node_id` states for its cluster, once it has one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = cluster.node_status(node_id)
        if status and status.get("cluster_id"):
            return status["cluster_id"]
        time.sleep(0.1)
    raise AssertionError(f"node {node_id} has no cluster id after {timeout_s} s")


def _recorded_cluster_id(data_dir: str) -> str | None:
    with open(os.path.join(data_dir, "node")) as f:
        return json.load(f).get("cluster_id")


def _one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# Marked so: a second process on a served directory is refused before it reads or writes
# anything there (server/data_lock.py), and the test then checks the nodes serve on; no node
# stops. One cluster serves both.
@pytest.mark.shares_cluster
def test_a_second_process_on_a_served_directory_exits_naming_the_holder(cluster):
    data_dir = cluster.data_dir(1)
    cluster.wait_for_leader()
    for node_id in (1, 2):  # the same node again, or another id on its files
        second = _serve(data_dir, node_id)
        assert second.returncode == 1
        line = _one_line(second)
        assert data_dir in line and f"pid {cluster.procs[1].pid}" in line, line
    with cluster.client() as c:
        c.append([b"still served"])


def test_a_node_started_on_another_nodes_directory_refuses(cluster):
    cluster.wait_for_leader()
    cluster.kill(3)
    wrong = _serve(cluster.data_dir(3), 2)
    assert wrong.returncode == 1
    assert "belongs to node 3, not to node 2" in _one_line(wrong)
    cluster.start(3)
    cluster.wait_converged()


def test_a_directory_that_recorded_no_node_is_adopted_then_kept(tmp_path):
    cluster = ProcessCluster(str(tmp_path))
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        with cluster.client() as c:
            c.append([b"before"])
        named = {_cluster_id(cluster, i) for i in cluster.ids}
        assert len(named) == 1, named
        cluster.kill(2)
        os.remove(os.path.join(cluster.data_dir(2), "node"))  # as an older version left it
        cluster.start(2)
        statuses = cluster.wait_converged()
        assert statuses[2]["commit_offset"] == 0, "the one record, at offset 0"
        assert _cluster_id(cluster, 2) in named, "the id comes back from the controller's log"
        assert _recorded_cluster_id(cluster.data_dir(2)) in named
        cluster.kill(2)
        assert "belongs to node 2" in _one_line(_serve(cluster.data_dir(2), 1))
    finally:
        cluster.stop_all()


@pytest.mark.shares_cluster
def test_unsafe_recover_refuses_a_directory_a_node_serves(cluster):
    cluster.wait_for_leader()
    data_dir = cluster.data_dir(1)
    args = [*QUORUMLOG, "unsafe-recover", "--data", data_dir, "--yes"]
    result = subprocess.run(
        [*args, "--members", f"1={cluster.address(1)}"], capture_output=True, text=True
    )
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert "in use by another process" in line and "stop that node first" in line, line
    with cluster.client() as c:
        assert c.status()  # untouched, still serving


def test_a_listen_address_in_use_is_one_line_and_nothing_is_written(tmp_path):
    data_dir = str(tmp_path / "node1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for flag in ("--listen", "--kafka-listen"):
            own = free_ports(1)[0]
            listen = port if flag == "--listen" else own
            args = [*QUORUMLOG, "serve", "--id", "1", "--data", data_dir]
            args += ["--listen", f"127.0.0.1:{listen}", "--peers", f"1=127.0.0.1:{listen}"]
            if flag == "--kafka-listen":
                args += ["--kafka-listen", f"127.0.0.1:{port}"]
            result = subprocess.run(args, capture_output=True, text=True, timeout=30)
            assert result.returncode == 1
            line = _one_line(result)
            assert f"127.0.0.1:{port} ({flag})" in line and "in use" in line, line
            assert not os.path.exists(data_dir), "nothing written before the node can serve"


def test_a_restart_with_other_peers_warns_and_keeps_the_stored_configuration(cluster):
    cluster.wait_for_leader()
    cluster.kill(3)
    other = ",".join(f"{i}={cluster.address(i)}" for i in cluster.ids) + ",4=127.0.0.1:9"
    cluster.start(3, extra=["--peers", other])  # the last --peers given is the one used
    statuses = cluster.wait_converged()
    assert sorted(statuses[3]["config"]["voters"]) == [1, 2, 3], "the stored one stands"
    with open(os.path.join(cluster.root, "node3.log")) as f:
        warnings = [line for line in f if "--peers differ" in line]
    assert len(warnings) == 1 and "which stands" in warnings[0], warnings


def test_a_node_with_another_clusters_data_exits_naming_both_ids(cluster, tmp_path):
    """A directory copied from another cluster, started in node 3's place: its peers refuse
    it at the handshake and it exits with one line, while nodes 1 and 2 serve on."""
    os.makedirs(tmp_path / "other")
    other = ProcessCluster(str(tmp_path / "other"))
    other.start_all()
    try:
        ours, theirs = _cluster_id(cluster, 3), _cluster_id(other, 3)
        assert _recorded_cluster_id(other.data_dir(3)) == theirs
    finally:
        other.stop_all()
    assert ours != theirs
    cluster.kill(3)
    own_data = cluster.data_dir(3) + ".own"
    os.rename(cluster.data_dir(3), own_data)
    shutil.copytree(other.data_dir(3), cluster.data_dir(3))
    peers = ",".join(f"{i}={cluster.address(i)}" for i in cluster.ids)
    args = [*QUORUMLOG, "serve", "--id", "3", "--data", cluster.data_dir(3)]
    started = time.monotonic()
    foreign = subprocess.run(
        [*args, "--listen", cluster.address(3), "--peers", peers],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert foreign.returncode == 1
    assert time.monotonic() - started < 20
    # It logs as it starts (to stderr, as every node): its error is the last line, whole.
    line = foreign.stderr.strip().splitlines()[-1]
    assert line.startswith("quorumlog serve: ") and "Traceback" not in foreign.stderr
    assert f"of cluster {theirs}" in line and ours in line, line
    with cluster.client() as c:
        c.append([b"served by nodes 1 and 2 meanwhile"])
    shutil.rmtree(cluster.data_dir(3))
    os.rename(own_data, cluster.data_dir(3))
    cluster.start(3)
    statuses = cluster.wait_converged()
    assert {s["cluster_id"] for s in statuses.values()} == {ours}
