"""ReadIndex in the core (raft/read_index.py): a linearizable read gets the leader's commit
offset once a quorum confirmed, after the request, that it still leads; every request gets
exactly one answer, None where this node could not confirm it."""

from __future__ import annotations

from quorumlog.raft.messages import AppendEntriesReply, Heartbeat, VoteRequest
from quorumlog.raft.read_index import READS_PENDING_MAX, ReadState
from tests.raft.helpers import append_reply, caught_up_leader, make_core, persist


def settled_leader():
    """A leader of {1, 2, 3} whose term's barrier (offset 0) committed."""
    core = caught_up_leader()
    persist(core, 10.0)
    core.take_outbox()
    assert core.commit_offset == 0
    return core


def read_heartbeats(core) -> dict[int, Heartbeat]:
    return {to: m for to, m in core.take_outbox() if isinstance(m, Heartbeat) and m.read_ctx}


def confirm(core, node_id: int, ctx: int) -> None:
    """Node `node_id`'s answer to the heartbeat of request `ctx`."""
    core.step(node_id, append_reply(node_id, core.term, 0, 0, heartbeat=True, read_ctx=ctx), 10.0)


def test_a_read_is_answered_once_a_quorum_confirmed_the_leadership_after_it():
    core = settled_leader()
    ctx = core.read_index()
    sent = read_heartbeats(core)
    assert set(sent) == {2, 3} and {m.read_ctx for m in sent.values()} == {ctx}
    assert core.take_read_states() == [], "only the leader itself so far"
    confirm(core, 3, ctx)
    assert core.take_read_states() == [ReadState(ctx, 0)]


def test_an_answer_to_a_later_request_confirms_the_earlier_ones_not_the_reverse():
    core = settled_leader()
    first, second, third = core.read_index(), core.read_index(), core.read_index()
    confirm(core, 2, second)
    assert core.take_read_states() == [ReadState(first, 0), ReadState(second, 0)]
    confirm(core, 3, first)  # late: from before the third request
    assert core.take_read_states() == []
    confirm(core, 3, third)
    assert core.take_read_states() == [ReadState(third, 0)]


def test_reads_this_node_cannot_confirm_are_answered_none():
    unsettled = caught_up_leader()  # its barrier not committed yet
    follower = make_core(2)
    assert [s.offset for s in (*_read(unsettled), *_read(follower))] == [None, None]
    core = settled_leader()
    waiting = core.read_index()
    # A candidate of a later term: this leader steps down, its read cannot be confirmed.
    vote = VoteRequest(
        group=0, term=core.term + 1, candidate_id=3, last_offset=5, last_term=9,
        pre_vote=False, transfer=True,
    )  # fmt: skip
    core.step(3, vote, 10.0)
    assert core.take_read_states() == [ReadState(waiting, None)]


def test_at_most_reads_pending_max_wait_the_oldest_answered_none():
    core = settled_leader()
    contexts = [core.read_index() for _ in range(READS_PENDING_MAX + 1)]
    assert core.take_read_states() == [ReadState(contexts[0], None)]
    confirm(core, 2, contexts[-1])
    assert [s.ctx for s in core.take_read_states()] == contexts[1:]


def test_a_follower_answers_a_read_heartbeat_with_its_context():
    follower = make_core(2)
    beat = Heartbeat(group=0, term=1, leader_id=1, leader_commit=-1, read_ctx=7)
    follower.step(1, beat, 1.0)
    ((to, reply),) = follower.take_outbox()
    assert to == 1 and isinstance(reply, AppendEntriesReply)
    assert reply.heartbeat and reply.read_ctx == 7


def _read(core) -> list[ReadState]:
    core.read_index()
    return core.take_read_states()
