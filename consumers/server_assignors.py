"""The server-side assignors of Kafka's consumer group protocol (KIP-848): which member of
a group gets which partition of the topics it subscribes to, computed by the coordinator.

`uniform` (Kafka's default): every partition to one of its topic's subscribers, counts as
even as the subscriptions allow, and a member keeps what it holds up to its share, so a
rebalance moves only what it must. `range`: per topic, its subscribers sorted by id get
consecutive ranges, the first ones one more, so members subscribing to topics of as many
partitions get the same partition numbers of each (co-partitioning). Ties go to the lower
member id: the same inputs give the same assignment on any node.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.assignment import assign as sticky_assign

UNIFORM, RANGE = "uniform", "range"
ASSIGNORS = (UNIFORM, RANGE)  # the first is the default

Assignment = dict[str, frozenset[TopicPartition]]


def assign(
    assignor: str,
    subscriptions: Mapping[str, Set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    """The target assignment: `subscriptions` are each member's topics, `partitions` each
    existing topic's count (a topic not in it is not assigned), `current` what each member
    holds now."""
    if assignor == RANGE:
        return _range(subscriptions, partitions)
    return _uniform(subscriptions, partitions, current)


def _range(subscriptions: Mapping[str, Set[str]], partitions: Mapping[str, int]) -> Assignment:
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for topic, count in sorted(partitions.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (i < extra)
            out[member].update((topic, p) for p in range(start, start + size))
            start += size
    return {m: frozenset(tps) for m, tps in out.items()}


def _uniform(
    subscriptions: Mapping[str, Set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    topics = {t for subscribed in subscriptions.values() for t in subscribed if t in partitions}
    wanted = {(t, p) for t in topics for p in range(partitions[t])}
    if len({frozenset(subscribed) for subscribed in subscriptions.values()}) <= 1:
        # Everyone subscribes alike: balanced and sticky across all partitions.
        held = {m: sorted(current.get(m, ())) for m in subscriptions}
        return {m: frozenset(tps) for m, tps in sticky_assign(wanted, subscriptions, held).items()}
    # Subscriptions differ: each partition, topic by topic, to the subscriber holding the
    # fewest so far; its current owner first among equals, then the lower id.
    out: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    owner = {tp: m for m, tps in current.items() if m in subscriptions for tp in tps}
    for tp in sorted(wanted):
        eligible = [m for m, subscribed in subscriptions.items() if tp[0] in subscribed]
        chosen = min(eligible, key=lambda m: (len(out[m]), owner.get(tp) != m, m))
        out[chosen].add(tp)
    return {m: frozenset(tps) for m, tps in out.items()}
