"""A follower in the Raft core (`raft/core.py`), one rule at a time: plain calls, no trio, no
sockets. Truncating a conflicting suffix, hinting where to resume, committing only what it
flushed and verified, the replies it owes its leader, and what a flush report vouches for."""

from __future__ import annotations

from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.wal import Log, run_inline
from quorumlog.raft.election import barrier_batch
from quorumlog.raft.follower import PENDING_REPLIES_MAX
from quorumlog.raft.messages import AppendResult, Heartbeat
from tests.log.helpers import batch_of
from tests.raft.helpers import entries, flush, make_core, persist


def test_a_follower_truncates_a_conflicting_suffix():
    core = make_core(term=1)
    core.log.append([batch_of(b"a")], term=1)  # 0
    core.log.append([batch_of(b"stale")], term=1)  # 1: never committed
    flush(core.log)
    leader_log = Log.open(MemoryFileSystem(), "/l", run_sync=run_inline)
    leader_log.append([batch_of(b"a")], term=1)
    leader_log.append([barrier_batch()], term=2)
    fresh = leader_log.read(1, 1 << 20).data
    core.step(
        2,
        entries(2, 2, fresh, prev_offset=0, prev_term=1),
        now=1.0,
    )
    assert core.log.term_at(1) == 2 and core.log.dirty_offset == 1
    ((to, reply),) = core.take_outbox()
    assert to == 2 and reply.result is AppendResult.SUCCESS and reply.last_dirty == 1


def test_a_follower_with_a_short_log_hints_where_to_resume():
    core = make_core()
    core.log.append([batch_of(b"a")], term=1)
    core.step(
        2,
        entries(2, 1, prev_offset=5, prev_term=1),
        now=1.0,
    )
    ((_, reply),) = core.take_outbox()
    assert reply.result is AppendResult.FAILURE
    assert (reply.conflict_offset, reply.conflict_term) == (0, 1)


def test_a_follower_commits_only_what_it_flushed_and_verified():
    core = make_core()
    leader_log = Log.open(MemoryFileSystem(), "/l", run_sync=run_inline)
    leader_log.append([batch_of(b"a", b"b")], term=1)
    data = leader_log.read(0, 1 << 20).data
    core.step(
        2,
        entries(2, 1, data, commit=1),
        now=1.0,
    )
    assert core.commit_offset == -1, "not flushed yet"
    persist(core, 1.0)
    assert core.commit_offset == 1
    (_, first), (_, report) = core.take_outbox()
    assert first.last_flushed == -1 and report.last_flushed == 1, "the flush is reported at once"


def test_a_follower_owes_its_leader_one_reply_per_flush_and_holds_a_bounded_number_back():
    """Appends asking for a flush wait for it; one flush answers all of them with one reply
    (it reports everything flushed), and no more than PENDING_REPLIES_MAX wait."""
    core = make_core()
    leader_log = Log.open(MemoryFileSystem(), "/l", run_sync=run_inline)
    sent = PENDING_REPLIES_MAX + 5
    for i in range(sent):
        prev = leader_log.dirty_offset
        leader_log.append([batch_of(b"r%d" % i)], term=1)
        data = leader_log.read(prev + 1, 1 << 20).data
        core.step(
            2,
            entries(2, 1, data, prev_offset=prev, prev_term=1 if prev >= 0 else 0, flush=True),
            1.0,
        )
    assert core.take_outbox() == [], "each reply waits for the flush"
    assert len(core.following.pending_replies) == PENDING_REPLIES_MAX
    persist(core, 1.0)
    ((to, reply),) = core.take_outbox()
    assert to == 2 and reply.last_flushed == reply.last_dirty == sent - 1
    assert core.following.pending_replies == []


def test_a_flush_reported_from_before_a_cut_does_not_vouch_for_what_replaced_it():
    """A follower flushed offsets 0-3 of term 1; a new leader's entries replace 2-3 in a
    round whose cut is not yet applied to the log, and in the same round the flusher's
    report of offset 3 (from before the cut) is taken: it counts up to offset 1 only, so
    the new entries neither commit here nor are reported flushed before their own flush."""
    core = make_core(2)
    old = Log.open(MemoryFileSystem(), "/old", run_sync=run_inline)
    for value in (b"a", b"b", b"c", b"d"):
        old.append([batch_of(value)], term=1)
    core.step(1, entries(1, 1, old.read(0, 1 << 20).data, commit=1), 1.0)
    persist(core, 1.0)
    core.take_outbox()
    new = Log.open(MemoryFileSystem(), "/new", run_sync=run_inline)
    new.append([batch_of(b"a")], term=1)
    new.append([batch_of(b"b")], term=1)
    new.append([batch_of(b"C")], term=3)
    new.append([batch_of(b"D")], term=3)
    replaced = new.read(2, 1 << 20).data
    core.step(3, entries(3, 3, replaced, prev_offset=1, prev_term=1, commit=3), 2.0)
    core.on_persisted(3, 2.0)  # the report of the old offsets 2-3, taken in the same round
    assert core.persisted_offset == 1 and core.commit_offset == 1
    assert all(m.last_flushed <= 1 for _, m in core.take_outbox())
    persist(core, 2.0)  # the node applies the round's writes; its flush covers them
    assert core.commit_offset == 3


def test_a_leader_back_in_a_new_term_must_verify_again_what_it_sent_before():
    """Seed 30095: node 2 led, sent offset 1 and lost it in a crash before its own flush,
    then led the next term without it and committed another entry there. A follower that
    flushed the lost one must not count it as verified by the same leader's new term."""
    core = make_core(term=1)
    leader_log = Log.open(MemoryFileSystem(), "/l", run_sync=run_inline)
    leader_log.append([batch_of(b"a")], term=1)
    leader_log.append([batch_of(b"lost in node 2's crash")], term=1)
    sent = leader_log.read(0, 1 << 20).data
    core.step(
        2,
        entries(2, 1, sent, commit=0),
        now=1.0,
    )
    persist(core, 1.0)
    assert core.commit_offset == 0 and core.following.verified_offset == 1

    # Term 2, node 2 again, its offset 1 now a barrier of term 2, committed with node 3.
    core.step(2, Heartbeat(group=0, term=2, leader_id=2, leader_commit=1), now=2.0)
    assert core.commit_offset == 0, "committed an entry the leader does not have"
    core.take_outbox()
    core.step(
        2,
        entries(2, 2, prev_offset=1, prev_term=2, commit=1),
        now=2.0,
    )
    ((_, reply),) = core.take_outbox()
    assert reply.result is AppendResult.FAILURE and core.commit_offset == 0
