"""Configuration changes in the Raft core (`raft/core.py`), one rule at a time: plain calls, no
trio, no sockets. Joint configurations, learners (their votes, promotion, removal when they
stall), removed nodes and how long a leader replicates to them, and what a member must hold
of the log."""

from __future__ import annotations

import dataclasses

from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.wal import Log, run_inline
from quorumlog.membership.changes import enter_joint, leave_joint, remove
from quorumlog.membership.config import Configuration
from quorumlog.raft.configs import config_batch
from quorumlog.raft.core import RaftCore
from quorumlog.raft.messages import AppendEntries, Heartbeat, TimeoutNow, VoteReply, VoteRequest
from quorumlog.raft.progress import Progress
from quorumlog.raft.reconfiguration import DEPARTING_TIMEOUTS
from quorumlog.raft.roles import Role
from tests.log.helpers import batch_of
from tests.raft.helpers import (
    BOOTSTRAP,
    PEERS,
    SETTINGS,
    append_reply,
    caught_up_leader,
    elect,
    entries,
    make_core,
    persist,
    propose,
)


def test_a_new_leader_leaves_a_joint_configuration_that_committed_under_the_last_one():
    """Seed 30217: a leader committed C(old,new) and crashed before it appended C(new).
    Whoever leads next leaves C(old,new) itself once its own term's first entry commits,
    or the group stays joint for good."""
    joint = enter_joint(BOOTSTRAP, {1: PEERS[1], 2: PEERS[2]})
    core = make_core(term=1)
    leader_log = Log.open(MemoryFileSystem(), "/l", run_sync=run_inline)
    leader_log.append([config_batch(joint)], term=1)
    sent = leader_log.read(0, 1 << 20).data
    core.step(
        2,
        entries(2, 1, sent, commit=0),
        now=1.0,
    )
    persist(core, 1.0)
    assert core.commit_offset == 0 and core.configs.committed.is_joint

    elect(core, now=10.0)  # its barrier at offset 1
    persist(core, 10.0)
    core.step(
        2,
        append_reply(2, core.term, 1, 1),
        10.0,
    )
    assert core.commit_offset == 1
    assert core.log.dirty_offset == 2, "C(new) is appended after the barrier"
    assert not core.config.is_joint and core.config.voters == {1, 2}


def test_a_leader_handing_over_leaves_c_old_new_to_the_target():
    """Seed 10043: a slow disk made a leader of C(old,new) hand the group over; C(old,new)
    committed and the leader appended C(new), which left the target's log behind its own.
    Outside C(new), it never campaigned and refused the target its vote, which C(old)
    needed: no one could lead. A leader handing over appends nothing; if the transfer is
    given up, it moves on to C(new) itself."""
    core = caught_up_leader()
    persist(core, 10.0)
    joint_offset = core.propose_config(enter_joint(core.config, {1: PEERS[1], 2: PEERS[2]}))
    core.transfer_leadership(2)
    persist(core, 10.05)
    for peer in (2, 3):
        core.step(peer, append_reply(peer, core.term, joint_offset, joint_offset), 10.1)
    assert core.configs.committed.is_joint and core.commit_offset == joint_offset
    assert core.log.dirty_offset == joint_offset, "no C(new) while handing over"
    assert any(isinstance(m, TimeoutNow) for _, m in core.take_outbox())
    for peer in (2, 3):  # the target's campaign failed: the transfer is given up
        core.step(
            peer, append_reply(peer, core.term, joint_offset, joint_offset, heartbeat=True), 10.6
        )
    core.tick(10.05 + SETTINGS.election_timeout_max_s + 0.01)
    assert core.is_leader and core.transfer is None
    assert core.log.dirty_offset == joint_offset + 1 and core.config.voters == {1, 2}


def test_a_node_left_out_of_a_configuration_not_yet_committed_still_campaigns():
    """Seed 10089: C(new) reached only the nodes it left out, and its leader stepped down.
    They refused the one node in C(new) their votes (its log was shorter) and, taking
    themselves for learners, never campaigned: no one could lead. Until C(new) commits, a
    node it leaves out may be needed to lead (Raft dissertation 4.2.2)."""
    joint = enter_joint(BOOTSTRAP, {2: PEERS[2], 3: PEERS[3]})
    new = leave_joint(joint)
    core = make_core(term=1)
    leader_log = Log.open(MemoryFileSystem(), "/l", run_sync=run_inline)
    leader_log.append([config_batch(joint)], term=1)
    leader_log.append([config_batch(new)], term=1)
    core.step(2, entries(2, 1, leader_log.read(0, 1 << 20).data, commit=0), now=1.0)
    persist(core, 1.0)
    assert core.configs.committed.is_joint and core.config == new
    assert core.role is Role.FOLLOWER, "C(new) is not committed: it may be needed"
    core.take_outbox()
    for step in range(1, 8):  # leader 2 is silent: node 1 campaigns once its turn comes
        core.tick(1.0 + step * SETTINGS.election_timeout_max_s)
    asked = {to for to, m in core.take_outbox() if isinstance(m, VoteRequest)}
    assert asked == {2, 3}, "it asks the voters of C(new)"
    # Once C(new) commits, it only learns.
    core.step(3, Heartbeat(group=0, term=5, leader_id=3, leader_commit=1), now=10.0)
    core.step(3, entries(3, 5, prev_offset=1, prev_term=1, commit=1), now=10.0)
    persist(core, 10.0)
    assert core.commit_offset == 1 and core.role is Role.LEARNER


def leader_that_removed_3() -> tuple[RaftCore, int]:
    """Leader 1 of {1, 2, 3} has removed node 3, committed with node 2's answer; node 3
    has not answered since. Returns the leader and the change's offset."""
    leader = caught_up_leader()
    change = leader.propose_config(remove(leader.config, 3))
    persist(leader, 10.0)
    leader.step(2, append_reply(2, leader.term, change, change), 10.0)
    assert leader.configs.committed_offset == change and leader.config.voters == {1, 2}
    return leader, change


def test_a_leader_replicates_to_a_removed_node_until_it_holds_its_removal_committed():
    """A node left out of a change may campaign until it holds the change committed (seed
    10089); the leader that commits it is the last that replicates to it, and if it stopped
    there the node would send a pre-vote every election timeout for good."""
    leader, change = leader_that_removed_3()
    assert 3 in leader.progress, "kept until it knows"
    leader.take_outbox()
    leader.tick(10.0 + SETTINGS.heartbeat_interval_s * 1.1)
    assert 3 in {to for to, m in leader.take_outbox() if isinstance(m, Heartbeat)}
    leader.step(3, append_reply(3, leader.term, change, change, commit_offset=change - 1), 10.1)
    assert 3 in leader.progress, "it holds the change, not yet committed"
    leader.step(
        3, append_reply(3, leader.term, change, change, heartbeat=True, commit_offset=change), 10.1
    )
    assert 3 not in leader.progress and set(leader.progress) == {2}


def test_a_leader_stops_replicating_to_a_removed_node_after_departing_timeouts():
    leader, _ = leader_that_removed_3()
    bound_s = DEPARTING_TIMEOUTS * SETTINGS.election_timeout_max_s
    now = 10.0
    while now < 10.0 + bound_s - 0.1:  # node 2 answers, node 3 never does
        now += 0.1
        leader.step(2, append_reply(2, leader.term, 1, 1, heartbeat=True), now)
        leader.tick(now)
    assert leader.is_leader and 3 in leader.progress
    now += 0.2
    leader.step(2, append_reply(2, leader.term, 1, 1, heartbeat=True), now)
    leader.tick(now)
    assert leader.is_leader and set(leader.progress) == {2}


def test_a_leader_asked_for_votes_by_a_node_outside_its_configuration_replicates_to_it():
    """A removed node that was down while its removal committed, or whose leader stepped
    down or crashed first, asks for votes once back, whatever its term: the leader takes
    it on until it holds the removal committed."""
    leader, change = leader_that_removed_3()
    leader.step(
        3, append_reply(3, leader.term, change, change, heartbeat=True, commit_offset=change), 10.1
    )
    assert 3 not in leader.progress
    leader.take_outbox()
    stale = VoteRequest(
        group=0, term=1, candidate_id=3, last_offset=0, last_term=1, pre_vote=True, transfer=False
    )
    leader.step(3, stale, 20.0)
    assert 3 in leader.progress and leader.progress[3].departing_until_s is not None
    leader.pump()
    sent = [m for to, m in leader.take_outbox() if to == 3]
    assert any(isinstance(m, VoteReply) and not m.granted for m in sent)
    assert any(isinstance(m, AppendEntries) for m in sent), "a probe: it learns from there"
    # A member asking for votes changes nothing.
    leader.step(2, dataclasses.replace(stale, candidate_id=2), 20.0)
    assert set(leader.progress) == {2, 3}


def test_a_new_leader_promotes_a_learner_only_once_an_entry_of_its_term_committed():
    """As an operator's change (actors/cluster/admin_calls.py): a new leader may not know yet what its
    predecessor committed, and a change on top of one it did not see could leave two
    majorities that do not meet (Raft dissertation, 4.1 errata)."""
    peers = {**PEERS, 4: "127.0.0.1:7004"}
    config = Configuration(
        version=1,
        voters=frozenset({1, 2, 3}),
        learners=frozenset({4}),
        learners_to_promote=frozenset({4}),
        addresses=peers,
    )
    core = make_core(config=config)
    elect(core)  # its barrier at offset 0, not committed
    core.step(4, append_reply(4, core.term, 0, 0), 10.0)
    core.tick(10.01)
    assert core.commit_offset == -1 and core.config == config, "not promoted yet"
    persist(core, 10.0)
    core.step(2, append_reply(2, core.term, 0, 0), 10.02)
    assert core.commit_offset == 0
    core.step(4, append_reply(4, core.term, 0, 0, heartbeat=True), 10.03)
    assert core.config.is_voter(4), "promoted once its term's barrier committed"


def test_a_learner_votes_when_asked_so_that_a_joint_configuration_can_elect():
    """Voters {1, 2} and learner 3 entered C(old={1,2}, new={1,3}) on 1 and 2 only; node 2
    is gone. Node 1 needs node 3's vote for C(new), and node 3, still a learner in its own
    configuration, must give it (the candidate decides whose votes count)."""
    learner_config = Configuration(
        version=1, voters=frozenset({1, 2}), learners=frozenset({3}), addresses=PEERS
    )
    core = make_core(node_id=3, config=learner_config)
    assert core.role is Role.LEARNER
    core.step(
        1,
        VoteRequest(
            group=0,
            term=2,
            candidate_id=1,
            last_offset=5,
            last_term=1,
            pre_vote=True,
            transfer=False,
        ),
        now=10.0,
    )
    core.step(
        1,
        VoteRequest(
            group=0,
            term=2,
            candidate_id=1,
            last_offset=5,
            last_term=1,
            pre_vote=False,
            transfer=False,
        ),
        now=10.0,
    )
    replies = [m for _, m in core.take_outbox()]
    assert [(r.pre_vote, r.granted) for r in replies] == [(True, True), (False, True)]
    assert core.role is Role.LEARNER, "voting does not make it a candidate"


def test_a_learner_that_stalls_behind_is_removed_after_learner_abandon_s():
    """An `add` cut short leaves a learner that never catches up: after learner_abandon_s
    without its log advancing, the leader removes it; one that advances stays."""
    with_learner = Configuration(
        version=1,
        voters=frozenset({1, 2, 3}),
        learners=frozenset({4}),
        learners_to_promote=frozenset({4}),
        addresses={**PEERS, 4: "127.0.0.1:7004"},
    )
    abandon_s = SETTINGS.learner_abandon_s
    for advancing in (False, True):
        core = make_core(config=with_learner)
        elect(core)
        for i in range(3):
            now = 10.0 + (i + 1) * abandon_s / 3
            propose(core, batch_of(b"x"), now, False)
            for peer in (2, 3, 4) if advancing else (2, 3):
                end = core.log.dirty_offset
                core.step(
                    peer,
                    append_reply(peer, core.term, -1, end),
                    now,
                )
            core.tick(now)
        assert (4 in core.config.members) is advancing, advancing


def test_a_member_need_not_hold_what_a_trim_put_before_the_log_start():
    """A member that joined from a leader that had dropped the trimmed records may be
    promoted by a leader that still holds some of them (simulation seed 10000)."""
    core = make_core()
    for value in (b"a", b"b", b"c"):
        core.log.append([batch_of(value)], term=1)
    core.log.committed = 2
    joined = Progress(2, 3, log_start=2)
    assert not core.holds_the_log(joined)
    core.set_log_floor(2)
    assert core.holds_the_log(joined)
    core.set_log_floor(9)  # past the commit offset: only what is committed can be trimmed
    assert not core.holds_the_log(Progress(2, 3, log_start=4))


def test_a_member_need_not_hold_raft_batches_its_retention_dropped():
    """A learner whose time retention dropped a front segment of Raft's own batches (no
    timestamp: always past retention.ms) lacks no record: it may be promoted (seed 82584),
    and one that lacks a record still may not."""
    core = make_core()
    config = Configuration.bootstrap({n: f"127.0.0.1:{7000 + n}" for n in (1, 2, 3)})
    for _ in range(2):
        core.log.append([config_batch(config)], term=1)
    core.log.append([batch_of(b"a")], term=1)
    core.log.committed = 2
    assert core.holds_the_log(Progress(2, 3, log_start=2)), "offsets 0-1 hold no record"
    assert not core.holds_the_log(Progress(2, 3, log_start=3)), "it lacks the record at 2"
    assert not core.holds_the_log(Progress(2, 3, log_start=2, floor=3)), "a witness's floor"
