"""The Raft rules of `raft/core.py`, one at a time: plain calls, no trio, no sockets.

Messages go in through `step`/`tick`/`on_persisted` with explicit times; what the core wants
sent comes out of `take_outbox`. The in-memory disk stands in for the log's files.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from quorumlog.actors.replica.campaigns import CampaignSlots
from quorumlog.log.batch import LOG_APPEND_TIME, BatchType, parse_batch, split_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.log.records import make_data_batch
from quorumlog.log.stamping import stamp
from quorumlog.log.wal import Log, run_inline
from quorumlog.membership.changes import (
    ConfigChangeError,
    add_learner,
    enter_joint,
    leave_joint,
    make_electable,
    remove,
)
from quorumlog.membership.config import Configuration
from quorumlog.raft.configs import config_batch
from quorumlog.raft.core import Proposal, RaftCore
from quorumlog.raft.election import (
    ELECTION_BACKOFF,
    ELECTION_BACKOFF_MAX,
    barrier_batch,
    election_order,
)
from quorumlog.raft.follower import PENDING_REPLIES_MAX
from quorumlog.raft.messages import (
    AppendEntries,
    AppendEntriesReply,
    AppendResult,
    Heartbeat,
    TimeoutNow,
    VoteReply,
    VoteRequest,
)
from quorumlog.raft.producers import PRODUCER_IDLE_S
from quorumlog.raft.progress import Progress
from quorumlog.raft.raft_log import RaftLog
from quorumlog.raft.reconfiguration import DEPARTING_TIMEOUTS
from quorumlog.raft.replication import RECOVERY_INFLIGHT_MAX, UNKNOWN_TERM
from quorumlog.raft.roles import Role
from quorumlog.raft.settings import RaftSettings
from tests.log.helpers import batch_of

SETTINGS = RaftSettings()
PEERS = {1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: "127.0.0.1:7003"}
BOOTSTRAP = Configuration.bootstrap(PEERS)


def flush(log: RaftLog) -> int:
    """What a node does with a core's log: its group actor applies the round's writes,
    then its flusher makes them durable. Returns the durable offset."""
    writes = log.take_writes()
    if writes is not None:
        writes.apply(log.stored)
    coro = log.stored.flush()
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the in-memory flush never suspends")


def persist(core: RaftCore, now: float) -> None:
    """What a node's flusher does: make the core's log durable and report how far."""
    core.on_persisted(flush(core.log), now)


def append_reply(
    node_id: int,
    term: int,
    flushed: int,
    dirty: int,
    result: AppendResult = AppendResult.SUCCESS,
    **rest,
) -> AppendEntriesReply:
    """A follower's answer to group 0's leader."""
    return AppendEntriesReply(
        group=0,
        node_id=node_id,
        term=term,
        last_flushed=flushed,
        last_dirty=dirty,
        result=result,
        **rest,
    )


def entries(
    leader_id: int,
    term: int,
    batches: bytes = b"",
    *,
    prev_offset: int = -1,
    prev_term: int = 0,
    commit: int = -1,
    flush: bool = False,
) -> AppendEntries:
    """An AppendEntries of group 0 (from the start of the log unless `prev_offset`)."""
    return AppendEntries(
        group=0,
        term=term,
        leader_id=leader_id,
        prev_offset=prev_offset,
        prev_term=prev_term,
        leader_commit=commit,
        batches=batches,
        flush=flush,
    )


def make_core(
    node_id: int = 1,
    term: int = 1,
    now: float = 0.0,
    config: Configuration | None = BOOTSTRAP,
    log_config: LogConfig | None = None,
    settings: RaftSettings = SETTINGS,
) -> RaftCore:
    fs = MemoryFileSystem()
    log = Log.open(fs, "/log", log_config, run_sync=run_inline)
    wire = config.to_wire() if config is not None else None
    meta = ConsensusMetadata("x", current_term=term, config=wire)
    # No peer's node looks alive, so a core campaigns as soon as its own timer runs out:
    # the turns of the group's election order are tested on their own.
    return RaftCore(
        node_id, 0, log, meta, settings, random.Random(node_id), now, peer_alive=lambda n: False
    )


def elect(core: RaftCore, now: float = 10.0) -> None:
    """Make `core` the leader of the next term with votes from 2 and 3."""
    core.tick(now)  # election deadline passed: pre-vote
    term = core.term + 1
    for peer in (2, 3):
        core.step(
            peer, VoteReply(group=0, node_id=peer, term=term, granted=True, pre_vote=True), now
        )
    for peer in (2, 3):
        core.step(
            peer,
            VoteReply(group=0, node_id=peer, term=core.term, granted=True, pre_vote=False),
            now,
        )
    assert core.role is Role.LEADER
    core.take_outbox()


def test_pre_vote_and_vote_are_refused_while_a_leader_is_live():
    core = make_core()
    core.step(
        2,
        entries(2, 1),
        now=1.0,
    )
    core.take_outbox()
    pre = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=10, last_term=1, pre_vote=True, transfer=False
    )
    core.step(3, pre, now=1.1)
    assert core.take_outbox() == [
        (3, VoteReply(group=0, node_id=1, term=1, granted=False, pre_vote=True))
    ]
    real = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=10, last_term=1, pre_vote=False, transfer=False
    )
    core.step(3, real, now=1.1)
    assert core.take_outbox() == [] and core.term == 1, "ignored: no term bump, no reply"
    transfer = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=10, last_term=1, pre_vote=False, transfer=True
    )
    core.step(3, transfer, now=1.1)
    assert core.take_outbox() == [
        (3, VoteReply(group=0, node_id=1, term=2, granted=True, pre_vote=False))
    ]
    assert core.metadata_dirty and core.meta.voted_for == 3, "the vote is persisted first"


def test_votes_only_for_a_log_at_least_as_up_to_date():
    core = make_core()
    core.log.append([batch_of(b"a")], term=1)
    stale = VoteRequest(
        group=0, term=2, candidate_id=3, last_offset=-1, last_term=0, pre_vote=False, transfer=False
    )
    core.step(3, stale, now=100.0)
    assert core.take_outbox() == [
        (3, VoteReply(group=0, node_id=1, term=2, granted=False, pre_vote=False))
    ]


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


def propose(core: RaftCore, batch: bytes, now: float, awaited: bool) -> tuple[int, int]:
    (offsets,) = core.propose([Proposal(split_batches(batch), awaited)], now)
    return offsets


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


def caught_up_leader(settings: RaftSettings = SETTINGS) -> RaftCore:
    """A leader whose follower 2 holds its barrier (offset 0), nothing in flight."""
    core = make_core(settings=settings)
    elect(core)
    core.step(
        2,
        append_reply(2, core.term, 0, 0),
        10.0,
    )
    return core


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
    assert joiner.metadata_dirty and joiner.meta.config == BOOTSTRAP.to_wire()
    assert joiner.log.log_start_offset == start
    # A node that knows a later committed configuration keeps it.
    later = Configuration.bootstrap({**PEERS, 4: "127.0.0.1:7004"})
    follower = make_core(3, term=leader.term, config=later)
    follower.configs.committed_offset = start + 5
    follower.step(1, reset, 10.0)
    assert follower.config == later


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
    assert len(core.pending_replies) == PENDING_REPLIES_MAX
    persist(core, 1.0)
    ((to, reply),) = core.take_outbox()
    assert to == 2 and reply.last_flushed == reply.last_dirty == sent - 1
    assert core.pending_replies == []


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
    assert core.commit_offset == 0 and core.verified_offset == 1

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


def test_a_leader_cut_off_from_the_majority_steps_down():
    core = make_core()
    elect(core, now=10.0)
    core.tick(10.0 + SETTINGS.election_timeout_max_s + 0.01)
    assert core.role is Role.FOLLOWER and core.leader_id is None


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


def test_a_node_whose_disk_was_slow_campaigns_an_election_timeout_late():
    s = SETTINGS
    healthy, slow = make_core(node_id=2), make_core(node_id=3)
    slow.campaign_late = True
    for core in (healthy, slow):
        core.step(
            1,
            entries(1, 1),
            now=1.0,
        )
    assert healthy.election_deadline_s <= 1.0 + s.election_timeout_max_s
    assert slow.election_deadline_s >= 1.0 + s.election_timeout_max_s + s.election_timeout_min_s


WITH_WITNESS = Configuration(
    version=1,
    voters=frozenset({1, 2, 3}),
    learners=frozenset(),
    addresses=PEERS,
    witnesses=frozenset({3}),
)


def test_a_witness_votes_but_never_campaigns_nor_takes_a_transfer():
    witness = make_core(node_id=3, config=WITH_WITNESS)
    for now in (10.0, 20.0, 30.0):  # long past every election deadline
        witness.tick(now)
    assert witness.role is Role.FOLLOWER and witness.term == 1 and not witness.take_outbox()
    witness.step(1, TimeoutNow(group=0, term=1, leader_id=1), now=31.0)
    assert witness.role is Role.FOLLOWER and witness.term == 1, "TimeoutNow is refused"
    witness.step(
        2,
        VoteRequest(
            group=0,
            term=2,
            candidate_id=2,
            last_offset=-1,
            last_term=0,
            pre_vote=False,
            transfer=False,
        ),
        now=40.0,
    )
    (reply,) = [m for _, m in witness.take_outbox()]
    assert reply.granted, "it votes like any voter"


def test_leadership_is_never_handed_to_a_witness():
    core = make_core(config=WITH_WITNESS)
    elect(core)
    with pytest.raises(ConfigChangeError, match="witness"):
        core.transfer_leadership(3)
    for peer in (2, 3):  # both answered lately
        core.step(
            peer,
            append_reply(peer, core.term, -1, -1, heartbeat=True),
            10.1,
        )
    assert core.live_voters() == [2]


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


def committed_leader_with_records(count: int) -> RaftCore:
    """A leader whose `count` records (after its barrier) are flushed on it and on 2."""
    leader = caught_up_leader()
    for i in range(count):
        propose(leader, batch_of(b"r%d" % i), 10.0, True)
    flush(leader.log)
    last = leader.log.dirty_offset
    leader.step(
        2,
        append_reply(2, leader.term, last, last),
        10,
    )
    persist(leader, 10.0)
    assert leader.commit_offset == last
    return leader


def first_message_to(leader: RaftCore, node_id: int) -> AppendEntries:
    leader.pump()
    sent = [m for to, m in leader.take_outbox() if to == node_id]
    return next(m for m in sent if isinstance(m, AppendEntries))


def test_a_witness_joins_with_the_uncommitted_tail_only_and_may_not_lead_without_the_rest():
    leader = committed_leader_with_records(10)
    committed = leader.commit_offset
    joining = add_learner(leader.config, 4, "127.0.0.1:7004", promote=True, witness=True)
    config_offset = leader.propose_config(joining)
    first = first_message_to(leader, 4)
    assert (first.prev_offset, first.prev_term) == (committed, UNKNOWN_TERM)
    assert first.base_config, "the committed configuration is below what it is sent"

    witness = make_core(4, term=leader.term, config=None)
    witness.step(1, first, 10.0)
    persist(witness, 10.0)
    assert witness.log.log_start_offset == committed + 1, "nothing committed was copied"
    assert witness.log.dirty_offset == config_offset and witness.config == joining
    for _, reply in witness.take_outbox():
        leader.step(4, reply, 10.0)
    leader.step(
        2,
        append_reply(2, leader.term, config_offset, config_offset),
        10.0,
    )
    persist(leader, 10.0)
    assert leader.commit_offset == config_offset
    assert leader.config.is_voter(4) and 4 in leader.config.witnesses, "promoted once caught up"

    # It votes and counts, but holds too little to lead: becoming a full voter is refused.
    with pytest.raises(ConfigChangeError, match=f"holds the log from offset {committed + 1}"):
        leader.propose_config(make_electable(leader.config, 4))


def test_a_node_restarted_at_the_leaders_start_without_a_base_config_forgets_its_own():
    """A witness that was down while the change adding it committed: its log starts at
    that change, which the first message carries instead of a base configuration. The
    configuration it knew before (as a voter of an older one) precedes nothing in its new
    log, so it is dropped, durably, rather than kept as what a truncation returns to."""
    leader = committed_leader_with_records(5)
    joining = add_learner(leader.config, 4, "127.0.0.1:7004", promote=True, witness=True)
    config_offset = leader.propose_config(joining)
    flush(leader.log)
    reply = append_reply(2, leader.term, config_offset, config_offset)
    leader.step(2, reply, 10.0)
    persist(leader, 10.0)
    assert leader.commit_offset >= config_offset, "committed before 4 heard anything"
    first = first_message_to(leader, 4)
    assert (first.prev_offset, first.prev_term) == (config_offset - 1, UNKNOWN_TERM)
    assert not first.base_config, "the committed configuration is in the entries"

    older = Configuration.bootstrap({**PEERS, 4: "127.0.0.1:7004"})
    witness = make_core(4, term=leader.term, config=older)
    witness.step(1, first, 10.0)
    assert witness.config == joining and witness.role is Role.LEARNER
    assert witness.configs.previous is None, "nothing in its log precedes the change"
    assert witness.meta.config is None and witness.metadata_dirty


def test_a_witness_of_the_controllers_group_copies_the_whole_log():
    leader = committed_leader_with_records(3)
    leader.witnesses_from_commit = False  # every member applies this group's whole log
    leader.propose_config(
        add_learner(leader.config, 4, "127.0.0.1:7004", promote=True, witness=True)
    )
    first = first_message_to(leader, 4)
    assert first.prev_term != UNKNOWN_TERM and leader.progress[4].floor == 0


def test_a_link_that_connects_gets_at_once_what_was_sent_before_it_was_up():
    core = caught_up_leader()
    propose(core, batch_of(b"x"), 10.0, True)
    assert len(sent_to_2(core)) == 1  # dropped: no link to 2 yet (the core cannot tell)
    assert not sent_to_2(core), "one in flight: nothing more until an answer or a timeout"
    core.peer_connected(2)
    (probe,) = sent_to_2(core)  # at once, long before the retransmit timeout
    assert probe.prev_offset == core.log.dirty_offset, "does it hold our last entry?"


# ------------------------------------------------------------- elections with many groups


def test_every_node_comes_first_in_about_a_third_of_the_groups_and_all_agree():
    voters = frozenset({1, 2, 3})
    orders = [election_order(group, voters) for group in range(3000)]
    assert all(sorted(order) == [1, 2, 3] for order in orders)
    firsts = Counter(order[0] for order in orders)
    assert all(900 < firsts[n] < 1100 for n in voters), firsts
    seconds = Counter(order[1] for order in orders if order[0] == 1)
    assert all(400 < seconds[n] < 600 for n in (2, 3)), "a lost node's groups spread too"


def _core_in_place(place: int, alive: set[int]) -> RaftCore:
    """A core of group 0 whose node stands at `place` in the group's election order."""
    node_id = election_order(0, BOOTSTRAP.voters)[place]
    core = make_core(node_id)
    core.peer_alive = lambda n: n in alive
    return core


def test_a_voter_gives_one_turn_to_each_live_voter_before_it_in_the_order():
    turn = SETTINGS.election_timeout_max_s - SETTINGS.election_timeout_min_s
    core = _core_in_place(2, alive={1, 2, 3})
    deadline = core.election_deadline_s
    core.tick(deadline)
    assert core.role is Role.FOLLOWER and not core.take_outbox(), "the two before it go first"
    assert core.election_deadline_s == pytest.approx(deadline + 2 * turn)
    core.tick(core.election_deadline_s)
    assert core.role is Role.PRE_CANDIDATE, "their turns passed: it campaigns"


def test_a_voter_whose_node_is_down_gets_no_turn():
    first = election_order(0, BOOTSTRAP.voters)[0]
    core = _core_in_place(1, alive=set(BOOTSTRAP.voters) - {first})
    core.tick(core.election_deadline_s)
    assert core.role is Role.PRE_CANDIDATE, "the one before it is down: no wait"


def test_elections_that_find_no_leader_widen_the_timeout_until_a_leader_is_heard():
    core = make_core()
    now = 0.0
    timeouts = []
    for _ in range(12):  # pre-votes that nobody answers
        now = core.election_deadline_s
        core.tick(now)
        core.take_outbox()
        timeouts.append(core.election_deadline_s - now)
    s = SETTINGS
    assert max(timeouts[:2]) <= s.election_timeout_max_s * ELECTION_BACKOFF**2
    assert max(timeouts[6:]) > s.election_timeout_max_s * 2, timeouts
    assert max(timeouts) <= s.election_timeout_max_s * ELECTION_BACKOFF_MAX
    core.step(2, Heartbeat(group=0, term=core.term, leader_id=2, leader_commit=-1), now)
    assert core.election_deadline_s - now <= s.election_timeout_max_s, "a leader resets it"


def test_a_group_cut_off_for_hours_keeps_a_bounded_timeout():
    core = make_core()
    core.failed_elections = 5_000  # 1.5**5000 overflows a float
    core.tick(core.election_deadline_s)
    timeout = core.election_deadline_s - core.now
    assert 0 < timeout <= SETTINGS.election_timeout_max_s * ELECTION_BACKOFF_MAX


def test_campaign_slots_are_taken_in_turn_and_passed_on_when_given_back():
    slots = CampaignSlots(limit=2)
    woken = []
    assert slots.take(1, lambda: woken.append(1)) and slots.take(2, lambda: woken.append(2))
    assert not slots.take(3, lambda: woken.append(3)) and slots.waiting(3)
    assert not slots.take(4, lambda: woken.append(4))
    assert slots.take(1, lambda: None), "a holder keeps its slot"
    slots.give_back(1)
    assert woken == [3] and not slots.waiting(3) and slots.take(3, lambda: None)
    assert not slots.take(5, lambda: woken.append(5)), "behind 4, which waited first"
    slots.forget(4)
    slots.give_back(2)
    assert woken == [3, 5] and slots.holders == 2
    slots.give_back(9)  # never held one: nothing changes
    assert slots.holders == 2


def test_a_replica_waiting_to_be_added_votes_for_no_one():
    """A node's new replica of a group it was moved out of (its log deleted) would
    otherwise count in a configuration from before the move that a replica left behind
    still holds: two leaders (simulation seed 10006 of the topic changes)."""
    core = make_core(config=None, term=3)
    for pre_vote in (True, False):
        request = VoteRequest(
            group=0,
            term=4,
            candidate_id=3,
            last_offset=7,
            last_term=2,
            pre_vote=pre_vote,
            transfer=False,
        )
        core.step(3, request, now=100.0)
        ((to, reply),) = core.take_outbox()
        assert to == 3 and not reply.granted
    assert core.meta.voted_for is None


def test_a_member_need_not_hold_what_a_trim_put_before_the_log_start():
    """A member that joined from a leader that had dropped the trimmed records may be
    promoted by a leader that still holds some of them (simulation seed 10000)."""
    core = make_core()
    for value in (b"a", b"b", b"c"):
        core.log.append([batch_of(value)], term=1)
    core.commit_offset = 2
    joined = Progress(2, 3, log_start=2)
    assert not core.holds_the_log(joined)
    core.log_floor = 2
    assert core.holds_the_log(joined)
    core.log_floor = 9  # past the commit offset: only what is committed can be trimmed
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
    core.commit_offset = 2
    assert core.holds_the_log(Progress(2, 3, log_start=2)), "offsets 0-1 hold no record"
    assert not core.holds_the_log(Progress(2, 3, log_start=3)), "it lacks the record at 2"
    assert not core.holds_the_log(Progress(2, 3, log_start=2, floor=3)), "a witness's floor"


def test_a_leader_is_under_replicated_while_a_voter_is_down_or_stays_behind():
    core = make_core()
    elect(core)  # with no peer alive, so that it campaigns at once
    alive = {2: True, 3: True}
    core.peer_alive = lambda n: alive[n]
    _, first = propose(core, batch_of(b"x"), 10.0, True)
    for peer in (2, 3):
        core.step(peer, append_reply(peer, core.term, first, first), 10.0)
    persist(core, 10.0)
    assert not core.under_replicated(10.0)
    alive[3] = False
    assert core.under_replicated(10.0), "a voter's node is down"
    alive[3] = True
    _, second = propose(core, batch_of(b"y"), 10.0, True)
    core.step(2, append_reply(2, core.term, second, second), 10.0)
    persist(core, 10.0)
    assert core.commit_offset == second  # 3's match last grew at 10.0
    window = SETTINGS.election_timeout_max_s
    assert not core.under_replicated(10.0 + window / 2), "behind, but only just"
    assert core.under_replicated(10.0 + window * 2), "behind for an election timeout"
    core.step(3, append_reply(3, core.term, second, second), 10.0 + window * 2)
    assert not core.under_replicated(10.0 + window * 2)
