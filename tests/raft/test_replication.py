"""A leader's replication in the Raft core (`raft/core.py`), one rule at a time: plain calls,
no trio, no sockets. What commits and when, what it asks followers to flush and how it
accounts for their replies, resends and probes, recovery in chunks within bounds on what is
in flight, a follower reset to its log start, stamps, producers idle too long, and when a
leader is under-replicated."""

from __future__ import annotations

import random

from quorumlog.log.batch import LOG_APPEND_TIME, BatchType, parse_batch, split_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.records import make_data_batch
from quorumlog.log.stamping import stamp
from quorumlog.membership.config import Configuration
from quorumlog.raft.core import Proposal, RaftCore
from quorumlog.raft.messages import UNKNOWN_TERM, AppendEntries, AppendResult
from quorumlog.raft.producers import PRODUCER_IDLE_S
from quorumlog.raft.progress import RECOVERY_INFLIGHT_MAX
from quorumlog.raft.roles import Role
from quorumlog.raft.settings import RaftSettings
from tests.log.helpers import batch_of
from tests.raft.helpers import (
    BOOTSTRAP,
    PEERS,
    SETTINGS,
    append_reply,
    caught_up_leader,
    elect,
    entries,
    flush,
    make_core,
    persist,
    propose,
    reach_only,
)


def test_entries_of_an_older_term_commit_only_through_the_new_leaders_barrier():
    core = make_core(term=1)
    core.log.append([batch_of(b"old")], term=1)  # offset 0, uncommitted, term 1
    elect(core)
    assert core.log.dirty_offset == 1, "the barrier of the new term is appended"
    persist(core, 10.0)
    # A follower acknowledges offset 0 only: not of this term, so nothing commits.
    core.step(
        2,
        append_reply(2, core.term, 0, 0),
        10.0,
    )
    assert core.commit_offset == -1
    core.step(
        2,
        append_reply(2, core.term, 1, 1),
        10.0,
    )
    assert core.commit_offset == 1, "the barrier commits, and the old entry with it"


def test_commit_needs_a_majority_of_flushed_replicas_the_leader_counted_as_any():
    core = make_core()
    elect(core)
    _, last = propose(core, batch_of(b"x", b"y"), 10.0, True)
    # Follower 2 holds everything but flushed nothing: no commit.
    core.step(
        2,
        append_reply(2, core.term, -1, last),
        10.0,
    )
    assert core.commit_offset == -1
    # It flushed everything, the leader nothing yet: one flushed copy of three.
    core.step(
        2,
        append_reply(2, core.term, last, last),
        10.0,
    )
    assert core.commit_offset == -1
    # Follower 3 flushed too: a majority without the leader (dissertation 10.2.1).
    core.step(
        3,
        append_reply(3, core.term, last, last),
        10.0,
    )
    assert core.commit_offset == last
    assert core.persisted_offset < last, "committed before the leader's own flush"


def test_the_leaders_flush_and_one_followers_make_a_majority():
    core = make_core()
    elect(core)
    _, last = propose(core, batch_of(b"x"), 10.0, True)
    core.step(
        2,
        append_reply(2, core.term, last, last),
        10.0,
    )
    assert core.commit_offset == -1
    persist(core, 10.0)
    assert core.commit_offset == last


def test_a_leader_forgets_a_producer_idle_for_a_day_as_it_commits():
    """Idleness counts on the core's clock (the simulation's, in the simulation)."""
    core = make_core()
    elect(core)
    idempotent = make_data_batch([(None, b"x", 0, None)], producer_id=7, producer_seq=0)
    _, first = propose(core, idempotent, 10.0, True)
    assert propose(core, idempotent, 20.0, True) == (first, first), "a retry"
    later = 10.0 + PRODUCER_IDLE_S
    _, last = propose(core, batch_of(b"y"), later, True)
    core.step(2, append_reply(2, core.term, last, last), later)
    persist(core, later)
    assert core.commit_offset == last and len(core.producers) == 0
    assert propose(core, idempotent, later, True) == (last + 1, last + 1), "new again"


def sent_to_2(core: RaftCore) -> list[AppendEntries]:
    core.pump()
    return [m for to, m in core.take_outbox() if to == 2 and isinstance(m, AppendEntries)]


def test_followers_fsync_before_replying_to_what_a_caller_waits_to_see_committed():
    for policy, flushes in (("quorum", [False, True]), ("lazy", [False, False])):
        core = caught_up_leader(RaftSettings(follower_flush=policy))
        flags = []
        for awaited in (False, True):  # an acks=leader append, then an acks=quorum one
            propose(core, batch_of(b"x"), 10.0, awaited)
            (message,) = sent_to_2(core)
            flags.append(message.flush)
            ok = append_reply(2, core.term, -1, core.log.dirty_offset)
            core.step(2, ok, 10.0)
        assert flags == flushes, policy


def test_a_reply_that_waits_for_a_slow_fsync_is_not_taken_for_a_lost_message():
    core = caught_up_leader()
    propose(core, batch_of(b"x"), 10.0, True)
    assert [m.flush for m in sent_to_2(core)] == [True]
    # Heartbeats show it holds offset 1, not flushed yet; its reply waits for that.
    holds = append_reply(2, core.term, 0, 1, heartbeat=True)
    core.step(2, holds, 10.1)
    core.tick(10.0 + 2 * SETTINGS.retransmit_timeout_s)
    assert sent_to_2(core) == [], "no resend, no probe"
    # Once flushed, a reply that still has not come was lost: probe again.
    core.step(
        2,
        append_reply(2, core.term, 1, 1, heartbeat=True),
        10.45,
    )
    core.tick(10.5)
    assert len(sent_to_2(core)) == 1


def test_a_reply_lost_after_the_fsync_is_asked_for_once_an_election_timeout_passed():
    """Seed 7002: a learner flushed what was in flight, its reply was lost, and it went
    quiet, so no heartbeat reply ever said it had flushed; a move waited on it for good."""
    core = caught_up_leader()
    propose(core, batch_of(b"x"), 10.0, True)
    sent_to_2(core)
    holds = append_reply(2, core.term, 0, 1, heartbeat=True)  # holds offset 1, unflushed
    core.step(2, holds, 10.1)
    core.tick(10.0 + SETTINGS.election_timeout_max_s / 2)
    assert sent_to_2(core) == [], "a slow fsync: its reply may still come"
    core.step(2, holds, 10.8)  # the last heartbeat reply before it went quiet
    core.tick(10.0 + 1.5 * SETTINGS.election_timeout_max_s)
    (ask,) = sent_to_2(core)
    assert ask.batches == b"", "an empty AppendEntries, whose answer says what it flushed"
    core.step(2, append_reply(2, core.term, 1, 1), 11.0)
    assert core.progress[2].flushed_offset == 1


def test_a_follower_whose_flush_report_was_lost_is_asked_again():
    """Seed 10002: a learner answered with offset 1 unflushed, flushed it, reported that in
    a message that was lost, and went quiet; the leader, nothing in flight, never heard."""
    core = caught_up_leader()
    propose(core, batch_of(b"x"), 10.0, False)
    sent_to_2(core)
    core.step(2, append_reply(2, core.term, 0, 1), 10.0)  # holds offset 1, flushed 0
    core.tick(10.0 + SETTINGS.retransmit_timeout_s / 2)
    assert sent_to_2(core) == [], "its report may still come"
    core.tick(10.0 + 1.5 * SETTINGS.retransmit_timeout_s)
    (ask,) = sent_to_2(core)
    assert ask.prev_offset == 1 and ask.batches == b"", "an empty AppendEntries"
    core.step(2, append_reply(2, core.term, 1, 1), 10.3)
    core.tick(10.3 + 2 * SETTINGS.retransmit_timeout_s)
    assert [m for m in sent_to_2(core) if m.batches == b""] == [], "it flushed: no more asking"


def test_a_late_duplicate_reply_does_not_free_the_slot_of_a_newer_message():
    core = caught_up_leader()
    ok = append_reply(2, core.term, 0, 0)
    propose(core, batch_of(b"x"), 10.0, True)
    assert [m.prev_offset for m in sent_to_2(core)] == [0]
    # A late duplicate of the earlier answer: offset 1 is still in flight (then lost).
    core.step(2, ok, 10.05)
    propose(core, batch_of(b"y"), 10.05, True)
    assert sent_to_2(core) == [], "one AppendEntries at a time to a follower that keeps up"
    # No answer within the retransmit timeout, and it does not hold offset 1: probe again;
    # its refusal says where its log ends, and offset 1 goes again.
    core.step(
        2,
        append_reply(2, core.term, 0, 0, heartbeat=True),
        10.1,
    )
    core.tick(10.1 + SETTINGS.retransmit_timeout_s)
    assert len(sent_to_2(core)) == 1, "a probe"
    no = append_reply(
        2, core.term, 0, 0, AppendResult.FAILURE, conflict_offset=0, conflict_term=core.term
    )
    core.step(2, no, 10.4)
    assert [m.prev_offset for m in sent_to_2(core)] == [0]


def test_a_late_answer_that_ends_a_probe_resends_what_it_does_not_cover():
    core = caught_up_leader()
    propose(core, batch_of(b"x"), 10.0, True)
    assert [m.prev_offset for m in sent_to_2(core)] == [0]  # offset 1 in flight, then lost
    # No answer within the retransmit timeout: probe from the leader's end.
    core.tick(10.0 + 2 * SETTINGS.retransmit_timeout_s)
    (probe,) = sent_to_2(core)
    assert probe.prev_offset == 1
    # A late answer to something sent before the probe ends it: the follower holds only
    # offset 0, so offset 1 goes again, now, not only once something new is appended.
    late = append_reply(2, core.term, 0, 0)
    core.step(2, late, 10.5)
    assert [m.prev_offset for m in sent_to_2(core)] == [0]


def test_a_recovering_follower_has_a_bounded_number_of_bytes_in_flight():
    window = SETTINGS.recovery_window_bytes
    rng = random.Random(7)
    # Batches of 600 KiB, larger than a 32 KiB chunk: each is sent whole; then small ones.
    for size, count in ((600 * 1024, 10), (1000, 3000)):
        core = caught_up_leader()
        for _ in range(count):
            propose(core, batch_of(rng.randbytes(size)), 10.0, True)
        sent = sent_to_2(core)
        assert len(sent) > 1, "recovery streams several messages"
        sizes = [len(m.batches) for m in sent]
        assert sum(sizes[:-1]) < window, "never past the window"
        assert window <= sum(sizes) or len(sent) == RECOVERY_INFLIGHT_MAX, "until it is full"
        # Each answer frees what it covers, and the stream goes on within the window.
        last = split_batches(sent[0].batches)[-1][0].last_offset
        core.step(
            2,
            append_reply(2, core.term, -1, last),
            10,
        )
        more = [len(m.batches) for m in sent_to_2(core)]
        assert more and sum(sizes[1:] + more[:-1]) < window


def test_a_recovery_streams_chunks_of_at_most_32_kib_without_follower_flushes():
    """Seed 004: a follower far behind gets the log in small chunks it does not fsync
    (its flusher reports what is durable), from the first message on."""
    core = caught_up_leader()
    rng = random.Random(4)
    for _ in range(3000):  # 3 MB of 1000-byte batches, each awaited by its caller
        propose(core, batch_of(rng.randbytes(1000)), 10.0, True)
    sent = sent_to_2(core)
    assert len(sent) > 1
    assert max(len(m.batches) for m in sent) <= SETTINGS.chunk_bytes_max
    assert not any(m.flush for m in sent)


def test_a_follower_reset_to_the_leaders_log_start_gets_the_configuration_retention_removed():
    leader = make_core(log_config=LogConfig(segment_bytes_max=4096))
    elect(leader)
    for i in range(20):
        propose(leader, batch_of(random.Random(i).randbytes(1000)), 10.0, True)
    flush(leader.log)
    leader.step(
        3,
        append_reply(3, leader.term, 20, 20),
        10,
    )
    persist(leader, 10.0)
    assert leader.commit_offset == 20
    start = leader.log.stored.truncate_prefix(leader.commit_offset)
    assert start > 0, "retention removed the oldest segments"
    # Follower 2 has nothing: the leader sends from its log start, prev term unknown.
    reply = append_reply(2, leader.term, -1, -1, AppendResult.FAILURE, conflict_term=0)
    leader.step(2, reply, 10.0)
    leader.pump()
    (reset,) = [m for to, m in leader.take_outbox() if to == 2]
    assert (reset.prev_offset, reset.prev_term) == (start - 1, UNKNOWN_TERM)
    assert reset.base_config, "the committed configuration's entry is not in the log"
    # A node that knows no configuration (it joined) takes it, durably.
    joiner = make_core(2, term=leader.term, config=None)
    assert joiner.role is Role.LEARNER
    joiner.step(1, reset, 10.0)
    assert joiner.config == BOOTSTRAP and joiner.role is Role.FOLLOWER
    assert joiner.hard.dirty and joiner.meta.config == BOOTSTRAP.to_wire()
    assert joiner.log.log_start_offset == start
    # A node that knows a later committed configuration keeps it.
    later = Configuration.bootstrap({**PEERS, 4: "127.0.0.1:7004"})
    follower = make_core(3, term=leader.term, config=later)
    follower.configs.committed_offset = start + 5
    follower.step(1, reset, 10.0)
    assert follower.config == later


def test_the_largest_stamp_is_learned_from_the_leaders_batches_and_never_undercut():
    """A follower learns the stamps in what it appends; as the next leader its stamp for
    a round is what it is given, and its record of the largest stays the largest."""
    follower = make_core(node_id=2)
    _, stamped = stamp(parse_batch(batch_of(b"a")), batch_of(b"a"), 9_000)
    follower.step(
        1,
        entries(1, 1, stamped),
        now=1.0,
    )
    assert follower.max_stamp_ms == 9_000
    leader = make_core()
    elect(leader)
    leader.propose([Proposal(split_batches(batch_of(b"b")), True)], 10.0, stamp_ms=12_000)
    leader.propose([Proposal(split_batches(batch_of(b"c")), True)], 10.0)
    assert leader.max_stamp_ms == 12_000
    stamps = [
        (h.timestamp_ms, bool(h.flags & LOG_APPEND_TIME))
        for h, _ in split_batches(leader.log.read(0, 1 << 20).data)
        if h.batch_type is BatchType.DATA
    ]
    assert stamps[-2][0] == 12_000 and stamps[-2][1] and not stamps[-1][1]


def test_a_link_that_connects_gets_at_once_what_was_sent_before_it_was_up():
    core = caught_up_leader()
    propose(core, batch_of(b"x"), 10.0, True)
    assert len(sent_to_2(core)) == 1  # dropped: no link to 2 yet (the core cannot tell)
    assert not sent_to_2(core), "one in flight: nothing more until an answer or a timeout"
    core.peer_connected(2)
    (probe,) = sent_to_2(core)  # at once, long before the retransmit timeout
    assert probe.prev_offset == core.log.dirty_offset, "does it hold our last entry?"


def test_a_leader_is_under_replicated_while_a_voter_is_down_or_stays_behind():
    core = make_core()
    elect(core)  # with no peer alive, so that it campaigns at once
    reach_only(core, alive={2, 3})
    _, first = propose(core, batch_of(b"x"), 10.0, True)
    for peer in (2, 3):
        core.step(peer, append_reply(peer, core.term, first, first), 10.0)
    persist(core, 10.0)
    assert not core.under_replicated(10.0)
    reach_only(core, alive={2})
    assert core.under_replicated(10.0), "a voter's node is down"
    reach_only(core, alive={2, 3})
    _, second = propose(core, batch_of(b"y"), 10.0, True)
    core.step(2, append_reply(2, core.term, second, second), 10.0)
    persist(core, 10.0)
    assert core.commit_offset == second  # 3's match last grew at 10.0
    window = SETTINGS.election_timeout_max_s
    assert not core.under_replicated(10.0 + window / 2), "behind, but only just"
    assert core.under_replicated(10.0 + window * 2), "behind for an election timeout"
    core.step(3, append_reply(3, core.term, second, second), 10.0 + window * 2)
    assert not core.under_replicated(10.0 + window * 2)
