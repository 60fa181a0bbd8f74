"""Witnesses in the Raft core (`raft/core.py`), one rule at a time: plain calls, no trio, no
sockets. A witness votes but never campaigns nor is handed leadership, joins with the
uncommitted tail only (except in the controller's group), and may not lead without the rest."""

from __future__ import annotations

import pytest

from quorumlog.membership.changes import ConfigChangeError, add_learner, make_electable
from quorumlog.membership.config import Configuration
from quorumlog.raft.core import RaftCore
from quorumlog.raft.messages import UNKNOWN_TERM, TimeoutNow, VoteRequest
from quorumlog.raft.roles import Role
from tests.log.helpers import batch_of
from tests.raft.helpers import (
    PEERS,
    WITH_WITNESS,
    append_reply,
    caught_up_leader,
    elect,
    first_message_to,
    flush,
    make_core,
    persist,
    propose,
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
    assert witness.meta.config is None and witness.hard.dirty


def test_a_witness_of_the_controllers_group_copies_the_whole_log():
    leader = committed_leader_with_records(3)
    leader.witnesses_from_commit = False  # every member applies this group's whole log
    leader.propose_config(
        add_learner(leader.config, 4, "127.0.0.1:7004", promote=True, witness=True)
    )
    first = first_message_to(leader, 4)
    assert first.prev_term != UNKNOWN_TERM and leader.progress[4].floor == 0
