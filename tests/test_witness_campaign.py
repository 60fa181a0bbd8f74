"""Simulation seed 30268, replayed on three cores: a leader appends a change that removes a
voter, the witness and that voter take it, the leader crashes before its own flush. The
witness holds the newest log; the removed voter no longer votes in its copy; the old
leader's log is shorter. Without a rule for it no one ever leads (raft/witness.py)."""

from __future__ import annotations

import random

from quorumlog.log.wal import Log, run_inline
from quorumlog.membership.changes import remove
from quorumlog.raft.core import RaftCore
from quorumlog.raft.messages import AppendEntries
from quorumlog.raft.witness import WITNESS_CAMPAIGN_TIMEOUTS
from tests.log.helpers import batch_of
from tests.test_core import SETTINGS, WITH_WITNESS, elect, make_core, persist, propose

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


def test_a_witness_with_the_newest_log_leads_for_a_moment_and_hands_over():
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

    # Node 1 removes node 2: {1, 3}, 3 a witness. 2 and 3 take it; 1 crashes unflushed.
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
        peer_alive=lambda n: False,
    )
    assert cores[1].log.dirty_offset < change == cores[3].log.dirty_offset
    assert not cores[2]._is_voter() and 3 in cores[3].config.witnesses

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
