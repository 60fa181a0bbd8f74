"""A witness holds only the log's tail (it joined without the committed records): before it
may lead, its leader copies it the rest in 32 KiB chunks without flushes, and one flush at
the end moves the copy in front of its log (seed 000's appendix, step t=5)."""

from __future__ import annotations

import random

from quorumlog.log.backfill import BACKFILL_DIR
from quorumlog.log.wal import Log, run_inline
from quorumlog.membership.changes import add_learner, make_electable
from quorumlog.raft.core import RaftCore
from quorumlog.raft.messages import BackfillChunk, BackfillReply
from tests.log.helpers import batch_of, values_in
from tests.raft.helpers import (
    SETTINGS,
    append_reply,
    apply_writes,
    caught_up_leader,
    first_message_to,
    flush,
    make_core,
    persist,
    propose,
)

RECORDS = 40
VALUE = random.Random(7).randbytes(4000)  # 40 records of ~4 KiB that do not compress


def leader_and_witness() -> tuple[RaftCore, RaftCore]:
    """A leader of 40 committed records and node 4, a witness voter holding the tail
    from its join on."""
    leader = caught_up_leader()
    for i in range(RECORDS):
        propose(leader, batch_of(b"%d:" % i + VALUE), 10.0, True)
    flush(leader.log)
    last = leader.log.dirty_offset
    leader.step(
        2,
        append_reply(2, leader.term, last, last),
        10,
    )
    persist(leader, 10.0)
    joining = add_learner(leader.config, 4, "127.0.0.1:7004", promote=True, witness=True)
    config_offset = leader.propose_config(joining)
    witness = make_core(4, term=leader.term, config=None)
    witness.step(1, first_message_to(leader, 4), 10.0)
    persist(witness, 10.0)
    deliver(witness, leader)
    reply = append_reply(2, leader.term, config_offset, config_offset)
    leader.step(2, reply, 10.0)
    persist(leader, 10.0)
    assert leader.config.is_voter(4) and 4 in leader.config.witnesses
    assert witness.log.log_start_offset > last, "it holds the tail only"
    return leader, witness


def deliver(sender: RaftCore, to: RaftCore) -> list:
    """Everything `sender` sent to `to`, stepped in; returns those messages."""
    sent = [m for node, m in sender.take_outbox() if node == to.id]
    for message in sent:
        to.step(sender.id, message, 10.0)
    return sent


def copy_rounds(leader: RaftCore, witness: RaftCore, rounds: int) -> list[BackfillChunk]:
    chunks = []
    for _ in range(rounds):
        leader.pump()
        sent = [m for m in deliver(leader, witness) if isinstance(m, BackfillChunk)]
        chunks += sent
        replies = deliver(witness, leader)
        assert all(isinstance(r, BackfillReply) for r in replies)
    return chunks


def test_a_witness_is_copied_the_records_before_its_start_then_may_become_a_full_voter():
    leader, witness = leader_and_witness()
    tail_start = witness.log.log_start_offset
    leader.start_backfill(4)
    chunks = copy_rounds(leader, witness, 3)
    assert len(chunks) > 4, "the copy goes in chunks"
    assert all(len(c.batches) <= SETTINGS.chunk_bytes_max for c in chunks)
    assert witness.log.log_start_offset == tail_start, "nothing moves in before the flush"
    assert witness.outbox.flush_wanted, "the last chunk asks for the one flush"

    flush(witness.log)
    assert witness.log.log_start_offset == leader.log.log_start_offset == 0
    copied = witness.log.read(0, 1 << 30, tail_start - 1).data
    assert copied == leader.log.read(0, 1 << 30, tail_start - 1).data
    records = values_in(witness.log.read(1, 1 << 30, tail_start - 1).data)  # after the barrier
    assert [v[:3] for _, v in records[-2:]] == [b"38:", b"39:"]

    leader.step(4, witness.heartbeat_reply(), 10.0)
    leader.pump()
    assert leader.holds_whole_log(4)
    leader.propose_config(make_electable(leader.config, 4))  # no longer refused

    # The copy is durable and in place: the log reopens whole after a crash.
    fs = witness.log.stored._fs
    fs.crash()
    reopened = Log.open(fs, "/log", run_sync=run_inline)
    assert reopened.log_start_offset == 0 and reopened.dirty_offset == witness.log.dirty_offset
    assert not fs.exists(f"/log/{BACKFILL_DIR}")


def test_a_copy_cut_short_by_a_crash_is_dropped_and_done_again():
    leader, witness = leader_and_witness()
    tail_start = witness.log.log_start_offset
    dirty = witness.log.dirty_offset
    leader.start_backfill(4)
    leader.pump()
    first = [m for _, m in leader.take_outbox() if isinstance(m, BackfillChunk)][:2]
    for chunk in first:
        witness.step(1, chunk, 10.0)
    fs = witness.log.stored._fs
    assert not fs.exists(f"/log/{BACKFILL_DIR}"), "the core writes nothing itself"
    apply_writes(witness.log)  # the round's end: its writes, the copy's chunks among them
    assert fs.exists(f"/log/{BACKFILL_DIR}")
    fs.crash()
    reopened = Log.open(fs, "/log", run_sync=run_inline)
    assert (reopened.log_start_offset, reopened.dirty_offset) == (tail_start, dirty)
    assert not fs.exists(f"/log/{BACKFILL_DIR}")


def test_a_lost_chunk_is_sent_again_from_what_the_follower_holds():
    leader, witness = leader_and_witness()
    leader.start_backfill(4)
    leader.pump()
    chunks = [m for _, m in leader.take_outbox() if isinstance(m, BackfillChunk)]
    witness.step(1, chunks[0], 10.0)
    witness.step(1, chunks[2], 10.0)  # the second was lost
    gap = [m for _, m in witness.take_outbox()][-1]
    assert gap.gap and gap.next_offset == chunks[1].offset
    leader.step(4, gap, 10.0)
    leader.pump()
    again = [m for _, m in leader.take_outbox() if isinstance(m, BackfillChunk)]
    assert again[0].offset == chunks[1].offset
    for chunk in again:
        witness.step(1, chunk, 10.0)
    copy_rounds(leader, witness, 3)
    flush(witness.log)
    assert witness.log.log_start_offset == 0
