"""`status` from several nodes' answers when some were removed and still run (issue 50),
and the proof a node takes of its own removal (issue 45): pure functions, no cluster."""

from __future__ import annotations

from dataclasses import replace

from quorumlog.actors.cluster.removal import cluster_config, proves_removal, removed_by_own_log
from quorumlog.actors.replica.handle import GroupView
from quorumlog.client.protocol import newest_status, status_rows
from quorumlog.membership.config import Configuration
from quorumlog.raft.roles import Role


def answer(node_id: int, role: str, offset: int, members: list[int], **more) -> dict:
    return {
        "node_id": node_id,
        "role": role,
        "term": 3,
        "cluster_config_offset": offset,
        "cluster_members": {str(m): f"h:{m}" for m in members},
        "members": {str(m): f"h:{m}" for m in members},
        "config": {"voters": members, "learners": [], "joint": None},
        **more,
    }


def test_the_newest_configuration_names_the_members_and_old_ones_are_removed():
    old = answer(1, "learner", 10, [1, 2, 3, 4, 5, 6])  # removed, does not know it
    stale = answer(4, "follower", 30, [1, 2, 3, 4, 5, 6])
    knows = answer(2, "removed", 20, [3, 4, 5, 6], removed=True)
    current = [answer(i, "leader" if i == 6 else "follower", 40, [3, 5, 6]) for i in (3, 5, 6)]
    answers = {a["node_id"]: a for a in [old, stale, knows, *current]}
    newest = newest_status([old, stale, knows, *current])
    assert newest["cluster_config_offset"] == 40 and newest["node_id"] == 6
    rows = status_rows(newest, answers)
    assert [(r["node_id"], r["role"]) for r in rows] == [
        (1, "removed"),
        (2, "removed"),
        (3, "follower"),
        (4, "removed"),
        (5, "follower"),
        (6, "leader"),
    ]


def test_a_silent_member_is_unreachable_and_a_joining_node_is_listed_as_it_is():
    leader = answer(1, "leader", 5, [1, 2])
    joiner = {"node_id": 9, "role": "learner", "config": None, "cluster_config_offset": -1}
    rows = status_rows(leader, {9: joiner})
    assert rows == [leader, {"node_id": 2, "error": "unreachable"}, joiner]


def test_a_node_of_an_older_version_names_members_by_its_replica_of_default():
    old = {"node_id": 1, "role": "leader", "members": {"1": "a", "2": "b"}, "config": {}}
    assert [r["node_id"] for r in status_rows(old, {})] == [1, 2]


def view(config: Configuration, committed: Configuration, committed_offset: int) -> GroupView:
    return GroupView(
        node_id=1,
        term=2,
        role=Role.FOLLOWER,
        leader_id=None,
        commit_offset=committed_offset,
        settled=False,
        serves_clients=False,
        config=config,
        committed_config=committed,
        committed_config_offset=committed_offset,
        transfer_to=None,
        quiet=False,
        elections_started=0,
        recovery_bytes_sent=0,
    )


def config(*members: int, version: int = 1) -> Configuration:
    return Configuration(
        version=version,
        voters=frozenset(members),
        learners=frozenset(),
        addresses={m: f"h:{m}" for m in members},
    )


def test_a_later_committed_configuration_without_this_node_proves_its_removal():
    mine = config(1, 2, 3)
    own = view(mine, mine, 10)
    later = cluster_config(view(config(2, 3, version=2), config(2, 3, version=2), 12))
    assert later["members"] == [2, 3] and later["offset"] == 12
    assert proves_removal(1, own, later)
    assert not proves_removal(1, own, {**later, "offset": 10}), "not later than its own"
    assert not proves_removal(1, own, {**later, "members": [1, 2, 3]}), "still a member"
    # An uncommitted change here that keeps this node (it may be added back): wait.
    readded = view(config(1, 2, 3, version=3), mine, 10)
    assert not proves_removal(1, readded, later)
    joining = replace(own, config=None, committed_config=None, committed_config_offset=-1)
    assert not proves_removal(1, joining, later), "a node joining was never removed"


def test_its_own_log_proves_it_once_the_change_commits_there():
    mine, without = config(1, 2, 3), config(2, 3, version=2)
    assert not removed_by_own_log(1, view(without, mine, 10)), "not committed yet"
    assert removed_by_own_log(1, view(without, without, 12))
