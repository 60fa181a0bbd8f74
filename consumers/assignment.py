"""Sticky assignment: which member of a stream-mode group consumes which partition.

Every partition goes to exactly one member, the members' counts differ by at most one,
and a rebalance moves only what it must: a member keeps the partitions it holds, up to
its share, so a member that stays keeps consuming its unaffected partitions through a
rebalance (Kafka's sticky and cooperative assignors). Partitions move only when their
owner left, when they are new, or when their owner holds more than its share now that
another member joined. Ties go to the lower member id: the coordinator's choice is the
same whichever node computes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

TopicPartition = tuple[str, int]


def assign(
    partitions: Iterable[TopicPartition],
    members: Iterable[str],
    current: Mapping[str, Sequence[TopicPartition]] | None = None,
) -> dict[str, tuple[TopicPartition, ...]]:
    """The partitions of each member, each sorted; `current` is the last assignment."""
    current = current or {}
    wanted = sorted(set(partitions))
    names = sorted(set(members))
    if not names:
        return {}
    share, extra = divmod(len(wanted), len(names))
    exists = set(wanted)
    kept: dict[str, list[TopicPartition]] = {}
    claimed: set[TopicPartition] = set()
    for name in names:  # what each member still holds, each partition once
        mine = [tp for tp in sorted(current.get(name, ())) if tp in exists and tp not in claimed]
        kept[name] = mine
        claimed.update(mine)
    # The members that may hold one more than the share: those holding most already, so
    # that as few partitions as possible move.
    larger = set(sorted(names, key=lambda n: (-len(kept[n]), n))[:extra])
    pool: list[TopicPartition] = []
    for name in names:
        quota = share + (name in larger)
        pool += kept[name][quota:]
        del kept[name][quota:]
    pool += [tp for tp in wanted if tp not in claimed]
    for tp in sorted(pool):
        name = min(
            (n for n in names if len(kept[n]) < share + (n in larger)),
            key=lambda n: (len(kept[n]), n),
        )
        kept[name].append(tp)
    return {name: tuple(sorted(kept[name])) for name in names}
