"""`RaftCore.ready()`: what the node must do after a round, handed over once, in one piece."""

from __future__ import annotations

from quorumlog.raft.messages import VoteReply, VoteRequest
from tests.log.helpers import batch_of
from tests.raft.helpers import caught_up_leader, make_core, propose


def test_a_campaign_asks_to_save_the_term_and_vote_before_its_requests_go():
    core = make_core()
    assert not core.ready(), "nothing happened yet"
    core.tick(10.0)  # pre-vote: no term raised, nothing to save
    pre = core.ready()
    assert pre.hard_state is None and all(isinstance(m, VoteRequest) for _, m in pre.messages)
    core.step(2, _granted(core, pre_vote=True), 10.0)
    ready = core.ready()
    assert ready.hard_state is not None and ready.hard_state.voted_for == core.id
    assert {to for to, _ in ready.messages} == {2, 3}
    assert not core.ready(), "each output is handed over once"


def test_a_proposal_comes_out_as_log_writes_and_appends_to_the_followers():
    core = caught_up_leader()
    core.ready()
    last = core.log.stored.dirty_offset
    propose(core, batch_of(b"a", b"b"), 10.0, True)
    core.pump()
    ready = core.ready()
    assert core.log.stored.dirty_offset == last, "the core wrote nothing itself"
    ready.writes.apply(core.log.stored)
    assert core.log.stored.dirty_offset == last + 2
    assert 2 in {to for to, _ in ready.messages}, "node 2, caught up, gets them at once"


def _granted(core, pre_vote: bool) -> VoteReply:
    term = core.term + 1 if pre_vote else core.term
    return VoteReply(group=0, node_id=2, term=term, granted=True, pre_vote=pre_vote)
