"""The leader table: soft state `(topic, partition) -> (leader, term, revision)` that every
node keeps, fed by its own groups, by leader updates from other nodes and by reports.

Updates arrive in any order and from nodes that may know less: one is taken only if its
(revision, term) is newer than what the table holds, so a late or stale update can never
replace a newer belief. Within one (revision, term) a belief goes one way only: no leader
heard of yet (an election), then its leader (a term has at most one), then "ended": that
leader stepped down in the term (it lost check-quorum's majority) and, since a node never
leads a term twice, the partition has no leader until a later term (issue 45: a table that
could not say so named a leader that answered every append "not the leader"). This is
half of the fix for KUDU-1353
(a new master that answered from stale leader beliefs): the other half is how the table
travels and is repaired (actors/cluster/leader_table.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeaderEntry:
    topic: str
    partition: int
    leader_id: int | None  # None: no leader known in this term (an election is on)
    term: int
    revision: int
    # The leader of `term` stepped down (leader_id is None): only that leader's own node
    # says so, of its own replica (actors/cluster/leader_table.py).
    ended: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def newer_than(self, other: LeaderEntry) -> bool:
        mine = (self.revision, self.term, self._stage)
        return mine > (other.revision, other.term, other._stage)

    @property
    def _stage(self) -> int:
        """Where in its term the entry is: 0 electing, 1 led, 2 ended."""
        if self.ended:
            assert self.leader_id is None, self
            return 2
        return 0 if self.leader_id is None else 1


class LeaderTable:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], LeaderEntry] = {}
        self.version = 0  # grows with every change (what a cached digest is of)

    def update(self, entry: LeaderEntry) -> bool:
        """Take `entry` if it is newer than what the table holds; True if taken."""
        known = self._entries.get(entry.key)
        if known is not None and not entry.newer_than(known):
            return False
        self._entries[entry.key] = entry
        self.version += 1
        return True

    def merge(self, entries: Iterable[LeaderEntry]) -> list[LeaderEntry]:
        """Take each newer entry (a batch of updates or a node's full report); returns
        those taken, which are what to pass on."""
        return [e for e in entries if self.update(e)]

    def get(self, topic: str, partition: int) -> LeaderEntry | None:
        return self._entries.get((topic, partition))

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._entries if k[0] == topic]:
            del self._entries[key]
        self.version += 1

    def __iter__(self) -> Iterator[LeaderEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
