"""Rebalancing: the next replica moves, then preferred-leader changes, that spread the
partitions already placed evenly over the brokers (a node that joined holds nothing).

Replicas first. While some broker holds two or more replicas more than a live broker, one
replica goes from the most loaded broker to the least loaded live broker its set does not
hold, in the same place of the set (a preferred leader by a preferred leader); ties go to
the lower node id. Each move lowers the sum of squared loads, so it ends, with every node's
count within one of the others' (always reachable: a node with two more replicas than
another holds at least two partitions the other does not), and each move takes from a node
above the average or gives to one below, so the count stays near the fewest possible.
Among the partitions that could go, one is chosen whose topic the receiver holds least of
(so each topic spreads too), then one the giver does not lead (no leadership moves), then
the lowest key.

Then leaders, once no replica move is left: a preferred leadership (the first of a set)
goes from a node that has two or more than another along a chain of partitions, each led
by one node and held by the next (an augmenting path, found breadth first), so counts end
within one wherever the replica placement allows. Reordering a set copies nothing; the
leader balancer (actors/node/leader_balance.py) then hands leadership to the new first replica.

Pure and deterministic: every key, node and tie is taken in order. `busy` are partitions
with a move under way, left alone: a partition never has two moves at once.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Iterable, Mapping, Sequence

Key = tuple[str, int]  # (topic, partition)
REORDERS_MAX = 16  # preferred-leader changes per step: they copy nothing, but each moves a leader


def rebalance_step(
    replica_sets: Mapping[Key, Sequence[int]],
    brokers: Iterable[int],
    live: Iterable[int],
    moves_max: int,
    busy: Collection[Key] = (),
    reorders_max: int = REORDERS_MAX,
) -> dict[Key, tuple[int, ...]]:
    """The next new replica sets: up to `moves_max` replica moves while the replicas are
    not balanced (none when every possible move is of a busy partition: wait for it), then
    up to `reorders_max` preferred-leader changes. Empty: balanced, or waiting on `busy`."""
    nodes = sorted(set(brokers))
    targets = sorted(set(live) & set(nodes))
    load: Counter[int] = Counter({n: 0 for n in nodes})
    for replica_set in replica_sets.values():
        load.update(n for n in replica_set if n in load)
    if _improvable(load, nodes, targets):
        return _replica_moves(replica_sets, load, nodes, targets, moves_max, set(busy))
    return _leader_moves(replica_sets, nodes, targets, reorders_max, set(busy))


def rebalance_plan(
    replica_sets: Mapping[Key, Sequence[int]],
    brokers: Iterable[int],
    live: Iterable[int],
    steps_max: int = 10_000,
) -> list[tuple[Key, tuple[int, ...], tuple[int, ...]]]:
    """Every change a rebalance would make from here if nothing else changed, in order:
    (key, from, to). A preview (what `cluster rebalance` prints, and how many are left)."""
    nodes, targets = sorted(set(brokers)), sorted(set(live))
    sets = {k: tuple(v) for k, v in replica_sets.items()}
    plan = []
    for _ in range(steps_max):
        step = rebalance_step(sets, nodes, targets, moves_max=len(sets), reorders_max=len(sets))
        if not step:
            break
        for key, new_set in sorted(step.items()):
            plan.append((key, sets[key], new_set))
            sets[key] = new_set
    return plan


def is_replica_move(old: Sequence[int], new: Sequence[int]) -> bool:
    """Whether a change moves data (a replica) rather than reordering the same replicas."""
    return set(old) != set(new)


def _improvable(load: Counter[int], nodes: list[int], targets: list[int]) -> bool:
    if not nodes or not targets:
        return False
    return max(load[n] for n in nodes) - min(load[n] for n in targets) >= 2


def _replica_moves(
    replica_sets: Mapping[Key, Sequence[int]],
    load: Counter[int],
    nodes: list[int],
    targets: list[int],
    moves_max: int,
    busy: set[Key],
) -> dict[Key, tuple[int, ...]]:
    sets = {k: tuple(v) for k, v in replica_sets.items()}
    by_topic: Counter[tuple[int, str]] = Counter()  # (node, topic) -> replicas
    for (topic, _), replica_set in sets.items():
        by_topic.update((n, topic) for n in replica_set)
    moved: dict[Key, tuple[int, ...]] = {}
    while len(moved) < moves_max:
        found = _best_move(sets, load, by_topic, nodes, targets, busy)
        if found is None:
            break
        key, giver, taker = found
        new_set = tuple(taker if n == giver else n for n in sets[key])
        sets[key] = moved[key] = new_set
        busy.add(key)
        load[giver] -= 1
        load[taker] += 1
        by_topic[(giver, key[0])] -= 1
        by_topic[(taker, key[0])] += 1
    return moved


def _best_move(
    sets: dict[Key, tuple[int, ...]],
    load: Counter[int],
    by_topic: Counter[tuple[int, str]],
    nodes: list[int],
    targets: list[int],
    busy: set[Key],
) -> tuple[Key, int, int] | None:
    """(partition, from, to) of the next replica move, or None."""
    for giver in sorted(nodes, key=lambda n: (-load[n], n)):
        for taker in sorted(targets, key=lambda n: (load[n], n)):
            if load[giver] - load[taker] < 2:
                break
            candidates = [
                k for k, s in sets.items() if giver in s and taker not in s and k not in busy
            ]
            if candidates:
                key = min(
                    candidates,
                    key=lambda k: (
                        by_topic[(taker, k[0])] - by_topic[(giver, k[0])],
                        sets[k][0] == giver,
                        k,
                    ),
                )
                return key, giver, taker
    return None


def _leader_moves(
    replica_sets: Mapping[Key, Sequence[int]],
    nodes: list[int],
    targets: list[int],
    reorders_max: int,
    busy: set[Key],
) -> dict[Key, tuple[int, ...]]:
    sets = {k: tuple(v) for k, v in replica_sets.items() if v}
    leads: Counter[int] = Counter({n: 0 for n in nodes})
    led: dict[int, list[Key]] = {n: [] for n in nodes}
    for key in sorted(sets):
        first = sets[key][0]
        if first in leads:
            leads[first] += 1
            led[first].append(key)
    moved: dict[Key, tuple[int, ...]] = {}
    while len(moved) < reorders_max:
        path = _augmenting_path(sets, leads, led, nodes, set(targets), busy | moved.keys())
        if path is None or (moved and len(moved) + len(path) > reorders_max):
            break
        start = sets[path[0][0]][0]
        for key, taker in path:
            giver = sets[key][0]
            sets[key] = moved[key] = (taker, *(n for n in sets[key] if n != taker))
            led[giver].remove(key)
            led[taker].append(key)
            led[taker].sort()
        leads[start] -= 1  # the nodes between give one and take one
        leads[path[-1][1]] += 1
    return moved


def _augmenting_path(
    sets: dict[Key, tuple[int, ...]],
    leads: Counter[int],
    led: dict[int, list[Key]],
    nodes: list[int],
    targets: set[int],
    used: set[Key],
) -> list[tuple[Key, int]] | None:
    """Partitions to hand on, each to the next node [(key, new first), ...], that take one
    preferred leadership from a node with two or more than the node at the end."""
    for start in sorted(nodes, key=lambda n: (-leads[n], n)):
        came_from: dict[int, tuple[int, Key] | None] = {start: None}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for key in led[node]:
                if key in used:
                    continue
                for nxt in sets[key]:
                    if nxt in came_from or nxt not in targets:
                        continue
                    came_from[nxt] = (node, key)
                    if leads[start] - leads[nxt] >= 2:
                        return _walk_back(came_from, nxt)
                    queue.append(nxt)
    return None


def _walk_back(came_from: dict[int, tuple[int, Key] | None], end: int) -> list[tuple[Key, int]]:
    path = []
    node = end
    while (step := came_from[node]) is not None:
        previous, key = step
        path.append((key, node))
        node = previous
    return path[::-1]


def moves_left(replica_sets: Mapping[Key, Sequence[int]], brokers: Iterable[int]) -> int:
    """About how many changes a rebalance still makes (the fewest possible: what the nodes
    below the fewest allowed count need, replicas then preferred leaders), in one pass
    over the sets, cheap enough for every `status`."""
    nodes = sorted(set(brokers))
    if not nodes:
        return 0
    load: Counter[int] = Counter()
    leads: Counter[int] = Counter()
    for replica_set in replica_sets.values():
        load.update(replica_set)
        if replica_set:
            leads[replica_set[0]] += 1
    return sum(_short_of_floor(counts, nodes) for counts in (load, leads))


def _short_of_floor(counts: Counter[int], nodes: list[int]) -> int:
    floor = sum(counts[n] for n in nodes) // len(nodes)
    return sum(max(0, floor - counts[n]) for n in nodes)
