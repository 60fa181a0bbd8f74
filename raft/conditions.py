"""What a core's node tells it of itself. The core reads nothing of its node: these come
in as an input, like a message, sampled by the replica's task before each round's inputs
(actors/replica/actor.py), so that the simulation replays them as it replays the rest."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeConditions:
    # Members whose node this one has no link to (a crashed node's link closes): those
    # come last in an election's order, count as down for under-replication, and a quiet
    # leader does not wait for them (raft/election.py, raft/core.py `can_quiesce`).
    unreachable: frozenset[int] = frozenset()
    # The node is shutting down (actors/node/shutdown.py): it hands leadership over and
    # takes none (no campaign, no transfer to it); it still votes.
    stopping: bool = False
    # Its disk was slow lately (actors/services/disk_health.py): it campaigns an election
    # timeout late, so that a healthy voter wins first, and still when none does.
    campaign_late: bool = False
