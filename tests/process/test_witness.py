"""Real processes: seed 000's appendix, step by step. A voter dies; a witness (votes and
logs from its join on, never leads) is added and the dead voter demoted to log-only, each
one committed change, so that the cluster tolerates one more fault before any data is
copied; later the witness is copied the rest and becomes a full voter (t=5)."""

from __future__ import annotations

import json
import random
import signal

from quorumlog import Client
from quorumlog.cli.localcluster import ProcessCluster
from tests.process.test_membership import ql
from tests.process.test_topics import wait_until


def config_as_seen(brokers: str) -> dict:
    """The leader's `config` object of `status --json`."""
    out = ql("status", "-b", brokers, "--json", "--timeout", "5")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    return next(r["config"] for r in rows if r.get("role") == "leader")


def leaders(cluster: ProcessCluster, node_ids: list[int]) -> set[int]:
    """The nodes leading the controller or `default` now, as each node reports itself."""
    led = set()
    for node_id in node_ids:
        status = cluster.node_status(node_id) or {}
        if status.get("role") == "leader" or status.get("node_id") == status.get("controller_id"):
            led.add(node_id)
    return led


def test_witness_and_demotion_restore_fault_tolerance_then_the_dead_voter_returns(cluster):
    cluster.wait_for_leader()
    old = [random.Random(5).randbytes(2000) + b"%d" % i for i in range(300)]
    with Client(cluster.brokers, timeout=20) as c:
        first_offset = c.append([b"t=1"])
        c.append(old)  # ~600 KB the witness will have to copy before it may lead
    # t=2: node 1 dies; the majority is 2 of 3 and only 2 are live: no fault tolerance.
    dead_address = cluster.address(1)
    cluster.kill(1)
    witness_address = cluster.start_joiner(4)
    brokers = ",".join([cluster.address(2), cluster.address(3), witness_address])
    with Client(brokers, timeout=30) as c:
        # t=3: node 4 joins as a witness (majority 3 of 4).
        c.admin("add_member", node_id=4, address=witness_address, witness=True, wait=True)
        # t=4: node 1 demoted to log-only (majority 2 of 3: one fault tolerated again).
        c.admin("demote_member", node_id=1)
        config = config_as_seen(brokers)
        assert (config["voters"], config["witnesses"], config["log_only"]) == ([2, 3, 4], [4], [1])
        # Nothing committed before it joined was copied to it, "t=1" included.
        assert cluster.node_status(4)["log_start_offset"] > first_offset
        out = ql("transfer-leader", "-b", brokers, "4", "--timeout", "30")
        assert out.returncode == 1 and b"witness" in out.stderr, out.stderr

        # One more voter dies: node 2 and the witness still commit, and node 2 leads.
        cluster.kill(3)
        assert c.append([b"after the second fault"]) >= 0
        assert leaders(cluster, [2, 4]) == {2}, "the witness never leads"

        # The dead voter returns with its log and is promoted again, no new copy.
        cluster.start(1)
        c.admin("add_member", node_id=1, address=dead_address, wait=True)
        cluster.start(3)
        wait_until(lambda: cluster.node_status(3), 10, "node 3 answers")
        # t=5: the witness joined with the uncommitted tail only; promoted, it is first
        # copied the records before its join, then becomes a full voter.
        out = ql("members", "-b", brokers, "promote", "4", "--timeout", "60")
        assert out.returncode == 0, out.stderr
        assert cluster.node_status(4)["log_start_offset"] == 0, "it holds the whole log"
        config = config_as_seen(brokers)
        assert (config["voters"], config["witnesses"], config["log_only"]) == (
            [1, 2, 3, 4],
            [],
            [],
        )
        # It may lead now, and serves every record, those from before its join included.
        out = ql("transfer-leader", "-b", brokers, "4", "--timeout", "30")
        assert out.returncode == 0, out.stderr
    with Client(witness_address, timeout=30) as c:
        records = c.read(0)
        while records and len(records) < len(old) + 2:
            records += c.read(records[-1].offset + 1)
    assert [r.value for r in records] == [b"t=1", *old, b"after the second fault"]


def test_impossible_witness_and_demotion_calls_exit_1_at_once(cluster):
    cluster.wait_for_leader()
    for args in (("demote", "9"), ("promote", "2")):
        out = ql("members", "-b", cluster.brokers, *args, "--timeout", "30")
        assert out.returncode == 1, args
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    with Client(cluster.brokers, timeout=20) as c:
        c.admin("demote_member", node_id=3)
        c.admin("demote_member", node_id=2)
    out = ql("members", "-b", cluster.brokers, "demote", "1", "--timeout", "30")
    assert out.returncode == 1 and b"no voter that can lead" in out.stderr, out.stderr
    cluster.kill(3, signal.SIGTERM)  # a log-only member may stop: the cluster goes on
    with Client(cluster.brokers, timeout=20) as c:
        assert c.append([b"a majority of one"]) >= 0
