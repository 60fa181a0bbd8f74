"""Simulation seed 10089, replayed on four cores: voters {1, 2, 3} move to {4} by joint
consensus. C(new) reaches 2 and 3 only, and leader 1, cut off from node 4, steps down.
Node 4 holds C(old,new) only: its log is shorter, so C(old) refuses it. Nodes 1-3 hold
C(new), which leaves them out; were they learners from then on, no one could lead again.
Until C(new) commits they may still be needed to lead (Raft dissertation 4.2.2), and a
leader replicates to them until they hold it committed, so they do not campaign for good
(raft/reconfiguration.py)."""

from __future__ import annotations

from quorumlog.membership.changes import enter_joint
from quorumlog.membership.config import Configuration
from quorumlog.raft.core import RaftCore
from quorumlog.raft.messages import AppendEntries, VoteRequest
from quorumlog.raft.reconfiguration import DEPARTING_TIMEOUTS
from quorumlog.raft.roles import Role
from tests.raft.helpers import SETTINGS, elect, make_core, persist

STEP_S = 0.01
PEERS = {n: f"127.0.0.1:700{n}" for n in (1, 2, 3, 4)}
WITH_LEARNER_4 = Configuration(
    version=1, voters=frozenset({1, 2, 3}), learners=frozenset({4}), addresses=PEERS
)


def run(
    cores: dict[int, RaftCore],
    start: float,
    until: float,
    done,
    cut: frozenset[int] = frozenset(),
    sent: list | None = None,
) -> float:
    """Ticks, delivers every message between the cores but across `cut` (two nodes whose
    link is down) and flushes every log, STEP_S at a time, until `done()`; what was sent
    goes to `sent`. Returns the time reached."""
    now = start
    while now < until and not done():
        now += STEP_S
        for core in cores.values():
            core.tick(now)
        for _ in range(3):  # messages, their replies, and theirs
            for sender in cores.values():
                for to, message in sender.take_outbox():
                    if sent is not None:
                        sent.append((sender.id, to, message))
                    if to in cores and {sender.id, to} != cut:
                        cores[to].step(sender.id, message, now)
        for core in cores.values():
            persist(core, now)
    return now


def c_new_on_the_left_out_nodes_only() -> tuple[dict[int, RaftCore], int, float]:
    """Leader 1 commits C(old={1,2,3}, new={4}) and appends C(new), which reaches 2 and
    3 only; cut off from 4 it steps down. Returns the cores, C(new)'s offset and the time."""
    cores = {n: make_core(n, config=WITH_LEARNER_4) for n in PEERS}
    leader = cores[1]
    elect(leader)
    for n in (2, 3, 4):
        cores[n].step(1, leader.heartbeat_message(), 10.0)
    run(cores, 10.0, 11.0, lambda: all(c.commit_offset == 0 for c in cores.values()))
    joint = leader.propose_config(enter_joint(leader.config, {4: PEERS[4]}))
    assert cores[4].log.dirty_offset < joint
    leader.pump()
    replies = []
    for to, message in leader.take_outbox():
        if isinstance(message, AppendEntries):
            cores[to].step(1, message, 11.0)
            persist(cores[to], 11.0)
            replies += cores[to].take_outbox()
    persist(leader, 11.0)
    for _, reply in replies:  # the link 1-4 goes down once 4's answer is in
        leader.step(reply.node_id, reply, 11.0)
    assert leader.configs.committed.is_joint and leader.config.voters == {4}
    c_new = leader.log.dirty_offset
    now = run(cores, 11.0, 20.0, lambda: not leader.is_leader, cut=frozenset({1, 4}))
    assert all(cores[n].config.voters == {4} for n in (1, 2, 3)), "C(new) reached 1-3"
    assert cores[4].log.dirty_offset < c_new and cores[4].config.is_joint
    return cores, c_new, now


def test_nodes_left_out_of_c_new_lead_until_it_commits_then_only_learn():
    cores, c_new, now = c_new_on_the_left_out_nodes_only()
    node_4 = cores[4]

    def settled() -> bool:
        return (
            node_4.serves_clients
            and all(cores[n].role is Role.LEARNER for n in (1, 2, 3))
            and not node_4.progress
        )

    now = run(cores, now, now + 60.0, settled)
    assert settled(), "node 4 leads C(new); the nodes it left out learn that it committed"
    assert all(c.commit_offset >= c_new for c in cores.values())
    # A removed node that stays up asks no one for votes once it knows.
    sent: list = []
    run(cores, now, now + 10 * SETTINGS.election_timeout_max_s, lambda: False, sent=sent)
    assert not [m for m in sent if isinstance(m[2], VoteRequest)]
    assert node_4.serves_clients


def test_a_left_out_node_down_while_c_new_committed_learns_it_when_back():
    """Node 3 goes down holding C(new) uncommitted, past the time a leader keeps a node
    outside the configuration: back up, it asks for votes, and the leader that hears it
    replicates to it until it holds C(new) committed."""
    cores, c_new, now = c_new_on_the_left_out_nodes_only()
    node_3 = cores.pop(3)
    node_4 = cores[4]
    now = run(
        cores,
        now,
        now + 60.0,
        lambda: node_4.serves_clients and node_4.commit_offset >= c_new and not node_4.progress,
    )
    assert node_4.serves_clients and not node_4.progress
    now += DEPARTING_TIMEOUTS * SETTINGS.election_timeout_max_s
    assert node_3.role is Role.FOLLOWER and node_3.commit_offset < c_new
    cores[3] = node_3
    sent: list = []
    run(cores, now, now + 30.0, lambda: node_3.role is Role.LEARNER, sent=sent)
    assert node_3.role is Role.LEARNER and node_3.commit_offset >= c_new
    asked = [m for m in sent if isinstance(m[2], VoteRequest)]
    assert asked and all(s == 3 and m.pre_vote for s, _, m in asked), "its pre-votes only"
    assert node_4.serves_clients
