"""Real processes: `serve` on damaged storage exits 3 naming the file; a torn tail is cut."""

from __future__ import annotations

import os
import signal
import subprocess

from quorumlog.cli.localcluster import ProcessCluster


def segment_of(cluster: ProcessCluster, node_id: int) -> str:
    log_dir = os.path.join(cluster.data_dir(node_id), "topics", "default", "0", "log")
    return os.path.join(log_dir, sorted(n for n in os.listdir(log_dir) if n.endswith(".log"))[0])


def fill_and_stop(cluster: ProcessCluster, node_id: int) -> str:
    cluster.wait_for_leader()
    with cluster.client() as c:
        for i in range(50):
            c.append([b"record-%d" % i * 20])
    cluster.wait_converged()
    cluster.kill(node_id, signal.SIGTERM)
    return segment_of(cluster, node_id)


def test_damage_in_the_middle_refuses_to_start(cluster):
    path = fill_and_stop(cluster, 2)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    proc = cluster.start(2)
    assert proc.wait(timeout=10) == 3
    cluster.procs.pop(2)
    with open(os.path.join(cluster.root, "node2.log"), "rb") as f:
        assert path.encode() in f.read()
    assert os.path.getsize(path) == size, "nothing is deleted"


def test_torn_tail_is_cut_and_the_node_rejoins(cluster):
    path = fill_and_stop(cluster, 3)
    os.truncate(path, os.path.getsize(path) - 7)
    cluster.start(3)
    cluster.wait_converged()


def test_bad_usage_exits_2(tmp_path):
    from quorumlog.cli.localcluster import QUORUMLOG

    result = subprocess.run(
        [*QUORUMLOG, "serve", "--id", "1", "--data", str(tmp_path), "--listen", "127.0.0.1:1"],
        capture_output=True,
        timeout=20,
    )
    assert result.returncode == 2
    assert b"--peers" in result.stderr


def test_a_disk_that_refuses_writes_stops_its_node_with_one_line(tmp_path):
    """A write error (here EFBIG: the node's file size limit; a full disk is the same) is
    fatal to that node alone: it exits 1, its last line names the file and the error, and
    the others go on."""
    cluster = ProcessCluster(str(tmp_path))
    try:
        for node_id in (1, 2):
            cluster.start(node_id)
        cluster.start(3, wrapper=["sh", "-c", 'ulimit -f 4000; exec "$@"', "sh"])  # 2 MB
        cluster.wait_for_leader()
        with cluster.client(timeout=30) as c:
            while cluster.procs[3].poll() is None:
                c.append([os.urandom(1024) for _ in range(256)])
            assert cluster.procs[3].wait() == 1
            c.append([b"the others go on"])
        with open(tmp_path / "node3.log") as f:
            last = f.read().strip().splitlines()[-1]
        assert last.startswith("quorumlog serve: stopped on a storage error: write to ")
        assert "File too large" in last, last
    finally:
        cluster.stop_all()
