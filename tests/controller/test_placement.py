"""Placement spreads replicas and preferred leaders evenly, the same on every node."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.placement import PlacementError, place


def spread(counts: Counter, nodes: list[int]) -> int:
    return max(counts[n] for n in nodes) - min(counts[n] for n in nodes)


@given(nodes=st.integers(1, 9), partitions=st.integers(1, 120), data=st.data())
def test_one_topic_on_an_empty_cluster_is_balanced(nodes, partitions, data):
    replicas = data.draw(st.integers(1, nodes))
    brokers = list(range(1, nodes + 1))
    placed = place(partitions, replicas, brokers)
    assert len(placed) == partitions
    assert all(len(set(r)) == replicas and set(r) <= set(brokers) for r in placed)
    load = Counter(n for r in placed for n in r)
    leads = Counter(r[0] for r in placed)
    assert spread(load, brokers) <= 1
    assert spread(leads, brokers) <= 1
    assert place(partitions, replicas, reversed(brokers)) == placed, "same on every node"


@given(
    nodes=st.integers(1, 7),
    topics=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 7)), min_size=1, max_size=6),
)
def test_later_topics_balance_against_those_placed(nodes, topics):
    brokers = list(range(1, nodes + 1))
    existing: list[tuple[int, ...]] = []
    for partitions, replicas in topics:
        existing += place(partitions, min(replicas, nodes), brokers, existing)
    load = Counter(n for r in existing for n in r)
    leads = Counter(r[0] for r in existing)
    assert spread(load, brokers) <= 1
    assert spread(leads, brokers) <= 2


def test_a_new_node_takes_the_next_replicas_until_it_holds_as_many():
    existing = place(6, 1, [1, 2, 3])
    assert place(3, 1, [1, 2, 3, 4], existing) == [(4,), (4,), (1,)]


def test_more_replicas_than_brokers_is_refused():
    with pytest.raises(PlacementError, match="4 replicas asked for but only 3 brokers"):
        place(1, 4, [1, 2, 3])
