"""Real processes: losing a majority, then `unsafe-recover` on the survivor."""

from __future__ import annotations

import json
import signal
import subprocess

from quorumlog.cli.localcluster import QUORUMLOG


def ql(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=60)


def test_the_survivor_takes_over_and_reports_what_may_be_lost(cluster):
    cluster.wait_for_leader()
    with cluster.client() as c:
        c.create_topic("kept", partitions=2)
        for p in range(2):
            c.append([b"kept-%d" % p] * (p + 1), topic="kept", partition=p)
        first = c.append([b"before-%d" % i for i in range(100)])
    cluster.wait_converged()
    cluster.kill(2)
    cluster.kill(3)
    cluster.kill(1, signal.SIGTERM)
    survivor = cluster.data_dir(1)

    out = ql(
        "unsafe-recover", "--inspect", "--json", "--data", survivor, "--data", cluster.data_dir(2)
    )
    assert out.returncode == 0, out.stderr
    groups = {(g["topic"], g["partition"]): g for g in map(json.loads, out.stdout.splitlines())}
    assert next(iter(groups)) == ("__controller", 0), "the controller's group first"
    assert {("default", 0), ("kept", 0), ("kept", 1)} <= groups.keys()
    default = groups[("default", 0)]
    # Record offsets: the last record, whatever barriers or configurations came after it.
    assert default["last_offsets"][survivor] == first + 99
    assert default["replicas"][0]["known_commit_offset"] == first + 99
    assert default["best"] in (survivor, cluster.data_dir(2)) and default["lost"] is None
    assert set(groups[("kept", 1)]["last_offsets"]) == {survivor, cluster.data_dir(2)}
    lines = ql("unsafe-recover", "--inspect", "--data", survivor).stdout.decode().splitlines()
    assert lines[0].startswith("__controller/0: best ") and any(
        line.startswith("kept/1: best ") for line in lines
    ), lines

    members = f"1={cluster.address(1)}"
    out = ql("unsafe-recover", "--data", survivor, "--members", members)
    assert out.returncode == 1 and b"--yes" in out.stderr, "refuses without --yes"
    out = ql("unsafe-recover", "--data", survivor, "--members", members, "--yes")
    assert out.returncode == 0, out.stderr
    assert b"WARNING" in out.stderr

    cluster.start(1)
    with cluster.client(node_id=1, timeout=20) as c:
        import time

        deadline = time.monotonic() + 20
        while True:
            try:
                after = c.append([b"after"])
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert after > first + 99
        values = [r.value for r in c.read(first, 200)]
    assert values[:100] == [b"before-%d" % i for i in range(100)]
    assert values[-1] == b"after"
    out = ql("members", "-b", cluster.address(1), "list")
    assert out.stdout.decode().split() == ["1", cluster.address(1), "voter"]


def test_inspect_names_the_offsets_no_survivor_holds(tmp_path):
    from quorumlog.server.recover import Replica, lost_range

    a = Replica("a", last_offset=90, last_term=3, term=3, known_commit_offset=120, config_version=0)
    b = Replica("b", last_offset=100, last_term=2, term=3, known_commit_offset=95, config_version=0)
    best, lost = lost_range([a, b])
    assert best is a and lost == (91, 120)
