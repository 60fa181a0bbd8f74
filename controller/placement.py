"""Where a new topic's partitions go: replicas and preferred leaders spread evenly.

Partition by partition: the preferred leader (the first replica) is the node that leads
the fewest partitions among those that can take a replica without unbalancing the replica
counts; the other replicas go to the nodes with the fewest replicas, preferring among
equals those that lead most (the others are needed as leaders later). Replica counts then
differ by at most one between nodes, and so do leader counts within one topic placed on
a balanced cluster (two across topics of different replication factors). Ties go to the
lower node id: every node computes the same placement from the same inputs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K")


class PlacementError(ValueError):
    """The topic cannot be placed (more replicas than brokers)."""


def place(
    partitions: int,
    replicas: int,
    brokers: Iterable[int],
    existing: Iterable[Sequence[int]] = (),
) -> list[tuple[int, ...]]:
    """The replica set of each new partition, its preferred leader first. `existing` are
    the replica sets already placed (each led by its first), which the new ones balance."""
    nodes = sorted(set(brokers))
    if replicas < 1:
        raise PlacementError(f"a partition needs at least one replica, not {replicas}")
    if replicas > len(nodes):
        raise PlacementError(f"{replicas} replicas asked for but only {len(nodes)} brokers exist")
    load: Counter[int] = Counter({n: 0 for n in nodes})
    leads: Counter[int] = Counter({n: 0 for n in nodes})
    for replica_set in existing:
        load.update(n for n in replica_set if n in load)
        if replica_set and replica_set[0] in leads:
            leads[replica_set[0]] += 1
    placed = []
    for _ in range(partitions):
        ranked = sorted(nodes, key=lambda n: (load[n], leads[n], n))
        fewest_enough = load[ranked[replicas - 1]]
        eligible = [n for n in ranked if load[n] <= fewest_enough]
        leader = min(eligible, key=lambda n: (leads[n], load[n], n))
        others = sorted((n for n in nodes if n != leader), key=lambda n: (load[n], -leads[n], n))
        replica_set = (leader, *sorted(others[: replicas - 1]))
        load.update(replica_set)
        leads[leader] += 1
        placed.append(replica_set)
    return placed


def replace_departed(
    replica_sets: Mapping[K, Sequence[int]],
    brokers: Iterable[int],
    live: Iterable[int],
    leaders: Mapping[K, int | None] | None = None,
) -> dict[K, tuple[int, ...]]:
    """New replica sets for the partitions that have replicas on nodes that are no longer
    brokers (removed or replaced members). Each departed replica is replaced in its place
    (a preferred leader by a preferred leader) by the live broker with the fewest replicas
    that the set does not hold yet; where no live broker is left to take it, the set loses
    it. A set with no replica left on a broker (a replication factor of 1, or a move onto
    nodes that then left, cut short before they held anything: simulation seed 30325)
    starts again from the partition's leader as last known when it is a live broker, which
    holds the data; it waits while that leader is a broker that is down; otherwise every
    replica is replaced, and the new ones copy from whichever node still leads the group (a
    removed node serves its groups until they move: seed 10032 kept `[4]` for good).
    Only the sets that change are returned, each from the same inputs on every node."""
    nodes = set(brokers)
    candidates = sorted(nodes & set(live))
    load: Counter[int] = Counter({n: 0 for n in nodes})
    for replica_set in replica_sets.values():
        load.update(n for n in replica_set if n in nodes)
    moved: dict[K, tuple[int, ...]] = {}
    for key, replica_set in replica_sets.items():
        if all(n in nodes for n in replica_set):
            continue
        if not any(n in nodes for n in replica_set):
            leader = (leaders or {}).get(key)
            if leader in nodes and leader not in candidates:
                continue  # the holder of the data is only down: start from it once back
            if leader in candidates:
                replica_set = (leader, *(n for n in replica_set if n != leader))[: len(replica_set)]
                load[leader] += 1
        new_set: list[int] = []
        for n in replica_set:
            if n in nodes:
                new_set.append(n)
                continue
            free = [c for c in candidates if c not in replica_set and c not in new_set]
            if free:
                taker = min(free, key=lambda c: (load[c], c))
                load[taker] += 1
                new_set.append(taker)
        if new_set:  # no live broker at all: nothing to move to
            moved[key] = tuple(new_set)
    return moved


def resize(
    replica_sets: Mapping[K, Sequence[int]],
    factor: int,
    live: Iterable[int],
    leaders: Mapping[K, int | None] | None = None,
    existing: Iterable[Sequence[int]] = (),
) -> dict[K, tuple[int, ...]]:
    """New replica sets of `factor` replicas for the sets that have another number. A set
    grows by the live nodes with the fewest replicas (ties: the lower id), added after its
    own; it shrinks by dropping, among the replicas that are neither its current leader
    nor its preferred one (the first), those on nodes that are not live, then those on the
    nodes with the most replicas (ties: the higher id). `existing` are every replica set of
    the cluster (this topic's included), whose load the choices balance; each choice
    changes the load the next one sees. Only the sets that change are returned."""
    candidates = sorted(set(live))
    if factor > len(candidates):
        raise PlacementError(
            f"{factor} replicas asked for but only {len(candidates)} nodes are live"
        )
    load: Counter[int] = Counter({n: 0 for n in candidates})
    for replica_set in existing or replica_sets.values():
        load.update(replica_set)
    changed: dict[K, tuple[int, ...]] = {}
    for key, replica_set in replica_sets.items():
        new_set = list(replica_set)
        while len(new_set) < factor:
            taker = min((c for c in candidates if c not in new_set), key=lambda c: (load[c], c))
            new_set.append(taker)
            load[taker] += 1
        # Kept first: the current leader (no election needed), then the preferred one.
        leader = (leaders or {}).get(key)
        keep = [n for n in (leader, new_set[0]) if n in new_set][:factor]
        while len(new_set) > factor:
            dropped = max(
                (n for n in new_set if n not in keep),
                key=lambda n: (n not in candidates, load[n], n),
            )
            new_set.remove(dropped)
            load[dropped] -= 1
        if tuple(new_set) != tuple(replica_set):
            changed[key] = tuple(new_set)
    return changed
