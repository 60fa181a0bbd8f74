"""Simulation seed 30268, replayed on three cores: a leader appends a change that removes a
voter, the witness and that voter take it, the leader crashes before its own flush. The
witness and the removed voter hold the newest log; the old leader's log is shorter. The
removed voter may lead until the change commits (raft/reconfiguration.py); with it down,
only the witness can, and without a rule for that no one ever leads (raft/witness.py)."""

from __future__ import annotations

import random

from quorumlog.log.wal import Log, run_inline
from quorumlog.membership.changes import remove
from quorumlog.raft.core import RaftCore
from quorumlog.raft.messages import AppendEntries
from quorumlog.raft.roles import Role
from quorumlog.raft.witness import WITNESS_CAMPAIGN_TIMEOUTS
from tests.log.helpers import batch_of
from tests.raft.helpers import (
    SETTINGS,
    WITH_WITNESS,
    elect,
    make_core,
    persist,
    propose,
    reach_only,
)

STEP_S = 0.01


def run(cores: dict[int, RaftCore], start: float, until: float, done) -> float:
    """Ticks, delivers every message and flushes every log, STEP_S at a time, until
    `done()`; returns the time it took."""
    now = start
    while now < until and not done():
        now += STEP_S
        for core in cores.values():
            core.tick(now)
        for _ in range(3):  # messages, their replies, and theirs
            for sender in cores.values():
                for to, message in sender.take_outbox():
                    if to in cores:
                        cores[to].step(sender.id, message, now)
        for core in cores.values():
            persist(core, now)
    return now


def removal_taken_by_2_and_3_then_1_crashes() -> tuple[dict[int, RaftCore], int]:
    """Node 1 leads {1, 2, 3}, 3 a witness, and removes node 2; 2 and 3 take the change, 1
    crashes before its own flush. Returns the cores and the change's offset."""
    cores = {n: make_core(n, config=WITH_WITNESS) for n in (1, 2, 3)}
    leader = cores[1]
    elect(leader)
    for n in (2, 3):
        cores[n].step(1, leader.heartbeat_message(), 10.0)
    propose(leader, batch_of(b"acknowledged"), 10.0, True)
    run(
        cores,
        10.0,
        12.0,
        lambda: all(c.commit_offset == leader.log.dirty_offset for c in cores.values()),
    )
    change = leader.propose_config(remove(leader.config, 2))
    leader.pump()
    for to, message in leader.take_outbox():
        if isinstance(message, AppendEntries) and to in (2, 3):
            cores[to].step(1, message, 12.0)
            persist(cores[to], 12.0)
    fs = leader.log.stored._fs
    fs.crash()
    cores[1] = RaftCore(
        1,
        0,
        Log.open(fs, "/log", run_sync=run_inline),
        leader.meta,
        SETTINGS,
        random.Random(11),
        12.0,
    )
    reach_only(cores[1], alive=set())
    assert cores[1].log.dirty_offset < change == cores[3].log.dirty_offset
    assert not cores[2].configs.is_voter(2) and 3 in cores[3].config.witnesses
    return cores, change


def test_a_witness_with_the_newest_log_leads_for_a_moment_and_hands_over():
    cores, change = removal_taken_by_2_and_3_then_1_crashes()
    # Node 2 is down too: left out of a change not yet committed, it would campaign
    # itself (the next test), and only the witness is left with the newest log.
    del cores[2]
    witness = cores[3]
    led_as_witness = []

    def settled() -> bool:
        if witness.is_leader:
            led_as_witness.append(witness.serves_clients)
        return cores[1].serves_clients and cores[1].commit_offset >= change

    took = run(cores, 12.0, 60.0, settled) - 12.0
    assert settled(), "a voter that can lead leads again, with the change committed"
    assert led_as_witness and not any(led_as_witness), "the witness led, serving no one"
    assert took >= WITNESS_CAMPAIGN_TIMEOUTS * SETTINGS.election_timeout_min_s
    assert cores[1].config.voters == {1, 3}


def test_a_node_the_change_removes_leads_until_the_change_commits():
    """Seed 10089's rule: until the change that removes it commits, node 2 may be needed
    to lead; it holds the newest log, wins, commits the change, then steps down."""
    cores, change = removal_taken_by_2_and_3_then_1_crashes()
    led_by_2 = []

    def settled() -> bool:
        led_by_2.append(cores[2].is_leader)
        return cores[1].serves_clients and cores[1].commit_offset >= change

    run(cores, 12.0, 60.0, settled)
    assert settled(), "a voter that can lead leads again, with the change committed"
    assert any(led_by_2) and not cores[3].is_leader
    assert cores[2].role is Role.LEARNER, "removed once the change committed"
    assert cores[1].config.voters == {1, 3}
