"""Rebalancing spreads replicas, then preferred leaders, onto nodes that joined: within one
of the average, close to the fewest moves, never two moves of one partition at once, never
onto a node that is not live, and the same on every node."""

from __future__ import annotations

import math
import random
from collections import Counter

from quorumlog.controller.balance import (
    is_replica_move,
    rebalance_plan,
    rebalance_step,
)
from quorumlog.controller.placement import place


def loads(sets: dict) -> Counter:
    return Counter(n for s in sets.values() for n in s)


def leads(sets: dict) -> Counter:
    return Counter(s[0] for s in sets.values())


def within_one(counts: Counter, nodes: list[int]) -> bool:
    """Every node within one of the average."""
    average = sum(counts[n] for n in nodes) / len(nodes)
    return all(abs(counts[n] - average) <= 1 for n in nodes)


def spread(counts: Counter, nodes: list[int]) -> int:
    return max(counts[n] for n in nodes) - min(counts[n] for n in nodes)


def leadership_can_shift(sets: dict, nodes: list[int]) -> bool:
    """Whether some node could hand a preferred leadership on, along partitions it leads
    and their replicas, to a node that leads two fewer (a search of its own, by sets)."""
    lead = leads(sets)
    for start in nodes:
        reach, frontier = {start}, {start}
        while frontier:
            frontier = {n for s in sets.values() if s[0] in frontier for n in s} - reach
            reach |= frontier
        if any(lead[start] - lead[n] >= 2 for n in reach):
            return True
    return False


def fewest_moves(sets: dict, nodes: list[int]) -> int:
    """A lower bound: what the nodes below the fewest allowed count must receive."""
    load = loads(sets)
    floor = math.floor(sum(load[n] for n in nodes) / len(nodes))
    return sum(max(0, floor - load[n]) for n in nodes)


def run_to_balance(
    sets: dict, nodes: list[int], moves_max: int, live: list[int] | None = None
) -> tuple[int, int]:
    """Step as the rebalancer does, each move finishing one step after it was made (so
    it is busy meanwhile); returns (replica moves, reorders)."""
    live = nodes if live is None else live
    busy: set = set()
    replica_moves = reorders = 0
    for _ in range(100_000):
        step = rebalance_step(sets, nodes, live, moves_max - len(busy), busy)
        if not step and not busy:
            return replica_moves, reorders
        assert not step.keys() & busy, "a partition moves once at a time"
        assert sum(is_replica_move(sets[k], s) for k, s in step.items()) <= moves_max
        for key, new_set in step.items():
            old = sets[key]
            assert len(new_set) == len(old) == len(set(new_set)), (old, new_set)
            assert set(new_set) - set(old) <= set(live), "only onto live nodes"
            if is_replica_move(old, new_set):
                replica_moves += 1
            else:
                reorders += 1
            sets[key] = new_set
        busy = set(step)
    raise AssertionError("did not converge")


def test_a_thousand_partitions_spread_from_three_to_four_to_seven_nodes():
    nodes = [1, 2, 3]
    placed = place(1000, 3, nodes)
    sets = {("t", i): s for i, s in enumerate(placed)}
    assert within_one(leads(sets), nodes)

    nodes = [1, 2, 3, 4]
    lower = fewest_moves(sets, nodes)
    moved, reorders = run_to_balance(sets, nodes, moves_max=2)
    assert moved == lower == 750, "every move fills node 4: the fewest possible"
    assert spread(loads(sets), nodes) <= 1
    assert within_one(leads(sets), nodes)
    assert reorders <= 250 + 10, "about node 4's share of leaderships, each one move"

    nodes = [1, 2, 3, 4, 5, 6, 7]
    lower = fewest_moves(sets, nodes)
    moved, _ = run_to_balance(sets, nodes, moves_max=2)
    assert lower <= moved <= lower + 7
    assert spread(loads(sets), nodes) <= 1
    assert within_one(leads(sets), nodes)
    assert all(len(set(s)) == 3 for s in sets.values())


def test_several_topics_each_spread_onto_the_new_node():
    nodes = [1, 2, 3]
    sets: dict = {}
    for topic, partitions in (("a", 30), ("b", 6), ("c", 12)):
        for i, s in enumerate(place(partitions, 3, nodes, sets.values())):
            sets[(topic, i)] = s
    run_to_balance(sets, [1, 2, 3, 4], moves_max=2)
    for topic, partitions in (("a", 30), ("b", 6), ("c", 12)):
        on_4 = sum(4 in s for k, s in sets.items() if k[0] == topic)
        assert abs(on_4 - partitions * 3 / 4) <= 1, (topic, on_4)


def test_a_balanced_cluster_has_nothing_to_do():
    nodes = [1, 2, 3, 4]
    sets = {("t", i): s for i, s in enumerate(place(24, 3, nodes))}
    assert rebalance_step(sets, nodes, nodes, 2) == {}
    assert rebalance_plan(sets, nodes, nodes) == []


def test_moves_wait_for_busy_partitions_and_never_go_to_a_node_that_is_not_live():
    sets = {("t", i): (1, 2, 3) for i in range(6)}
    nodes = [1, 2, 3, 4, 5]
    step = rebalance_step(sets, nodes, [1, 2, 3, 4], 10)
    assert step and all(set(s) - {1, 2, 3} == {4} for s in step.values())
    busy = set(sets)
    assert rebalance_step(sets, nodes, nodes, 10, busy) == {}, "all busy: wait, no leaders"


def test_the_same_result_whatever_the_order_of_inputs():
    rng = random.Random(7)
    sets = {("t", i): tuple(rng.sample([1, 2, 3], 2)) for i in range(40)}
    shuffled = dict(rng.sample(list(sets.items()), len(sets)))
    nodes = [1, 2, 3, 4, 5]
    assert rebalance_step(sets, nodes, nodes, 3) == rebalance_step(
        shuffled, nodes[::-1], nodes[::-1], 3
    )
    assert rebalance_plan(sets, nodes, nodes) == rebalance_plan(shuffled, nodes[::-1], nodes)


def test_the_plan_ends_where_the_steps_end():
    nodes = [1, 2, 3]
    sets = {("t", i): s for i, s in enumerate(place(60, 2, nodes))}
    plan = rebalance_plan(sets, [1, 2, 3, 4], [1, 2, 3, 4])
    planned = dict(sets)
    for key, old, new in plan:
        assert planned[key] == old
        planned[key] = new
    assert within_one(loads(planned), [1, 2, 3, 4])
    assert within_one(leads(planned), [1, 2, 3, 4])
    run_to_balance(sets, [1, 2, 3, 4], moves_max=100)
    assert loads(sets) == loads(planned)


def test_random_clusters_converge_within_one():
    """Replicas always end within one of each other; leaders within one of the average
    unless the placement forbids it (a node holding only single-replica partitions leads
    them all), and then no leadership can be handed on."""
    rng = random.Random(20261128)
    leaders_within_one = 0
    for _ in range(300):
        before = rng.randint(1, 6)
        after = before + rng.randint(0, 4)
        old_nodes = list(range(1, before + 1))
        sets: dict = {}
        for t in range(rng.randint(1, 4)):
            replicas = rng.randint(1, before)
            for i in range(rng.randint(1, 40)):
                sets[(f"t{t}", i)] = tuple(rng.sample(old_nodes, replicas))
        nodes = list(range(1, after + 1))
        run_to_balance(sets, nodes, moves_max=rng.randint(1, 4))
        assert spread(loads(sets), nodes) <= 1, sets
        assert not leadership_can_shift(sets, nodes), sets
        leaders_within_one += within_one(leads(sets), nodes)
    assert leaders_within_one >= 297
