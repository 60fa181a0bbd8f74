"""The leader table takes an update only if its (revision, term) is newer (KUDU-1353)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from quorumlog.controller.leaders import LeaderEntry, LeaderTable


def entry(leader: int | None, term: int, revision: int = 5, partition: int = 0) -> LeaderEntry:
    return LeaderEntry("events", partition, leader, term, revision)


def test_a_newer_term_replaces_an_older_one_and_never_the_reverse():
    table = LeaderTable()
    assert table.update(entry(1, term=3))
    assert table.update(entry(2, term=4))
    assert not table.update(entry(1, term=3)), "a late update of the old term"
    assert table.get("events", 0).leader_id == 2


def test_a_newer_revision_wins_over_a_higher_term_of_the_old_replica_set():
    table = LeaderTable()
    table.update(entry(1, term=9, revision=5))
    assert table.update(entry(4, term=2, revision=6))
    assert not table.update(entry(1, term=10, revision=5))
    assert table.get("events", 0).leader_id == 4


def test_a_known_leader_fills_in_an_unknown_one_of_the_same_term_but_is_never_erased():
    table = LeaderTable()
    table.update(entry(None, term=4))  # a follower that has not heard from the leader yet
    assert table.update(entry(3, term=4))
    assert not table.update(entry(None, term=4))
    assert table.get("events", 0).leader_id == 3


def test_merge_returns_what_was_taken_and_forget_topic_drops_its_partitions():
    table = LeaderTable()
    table.update(entry(1, term=3, partition=0))
    taken = table.merge([entry(2, term=2, partition=0), entry(2, term=1, partition=1)])
    assert taken == [entry(2, term=1, partition=1)]
    table.forget_topic("events")
    assert len(table) == 0


@given(
    updates=st.lists(
        st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(1, 5)), st.integers(0, 9)),
        min_size=1,
        max_size=30,
    ),
    seed=st.integers(0, 2**32),
)
def test_any_arrival_order_ends_with_the_newest(updates, seed):
    # Within one (revision, term) there is at most one leader (Raft's election safety).
    leader_of = {}
    entries = []
    for revision, leader, term in updates:
        leader = leader_of.setdefault((revision, term), leader) if leader is not None else None
        entries.append(entry(leader, term, revision))
    shuffled = entries[:]
    random.Random(seed).shuffle(shuffled)
    table = LeaderTable()
    table.merge(shuffled)
    newest = max((e.revision, e.term) for e in entries)
    got = table.get("events", 0)
    assert (got.revision, got.term) == newest
    if any((e.revision, e.term) == newest and e.leader_id is not None for e in entries):
        assert got.leader_id == leader_of[newest]


def ended(term: int, revision: int = 5) -> LeaderEntry:
    return LeaderEntry("events", 0, None, term, revision, ended=True)


def test_a_leader_that_stepped_down_replaces_itself_and_no_late_update_brings_it_back():
    """Issue 45: check-quorum stepped the leader down in its term; a node never leads a
    term twice, so nothing of that term may name it again."""
    table = LeaderTable()
    table.update(entry(None, term=4))
    table.update(entry(3, term=4))
    assert table.update(ended(term=4))
    assert table.get("events", 0).leader_id is None
    assert not table.update(entry(3, term=4)), "a late update of its leadership"
    assert not table.update(entry(None, term=4)), "a follower that heard of no leader"
    assert table.update(entry(None, term=5)), "a later term's election"
    assert not table.update(ended(term=4))


@given(
    updates=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 2)),
        min_size=1,
        max_size=30,
    ),
    seed=st.integers(0, 2**32),
)
def test_any_arrival_order_ends_with_the_last_stage_of_the_newest_term(updates, seed):
    """Each update is of a stage of its term: 0 electing, 1 led (by the term's one
    leader), 2 ended."""
    entries = [
        ended(term) if stage == 2 else entry(10 + term if stage == 1 else None, term)
        for term, stage in updates
    ]
    random.Random(seed).shuffle(entries)
    table = LeaderTable()
    table.merge(entries)
    got = table.get("events", 0)
    newest_term = max(t for t, _ in updates)
    last_stage = max(s for t, s in updates if t == newest_term)
    assert got.term == newest_term
    assert got.ended == (last_stage == 2)
    assert (got.leader_id is not None) == (last_stage == 1)
