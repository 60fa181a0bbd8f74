"""One `__groups` partition as the coordinator leading it sees it: its groups' state,
applied from the partition's committed commands (a command log: actors/coordinator/
command_log.py), and the members' sessions, soft state no log holds
(actors/coordinator/coordinator.py answers the calls)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from quorumlog.actors.coordinator.command_log import CommandLog, Machine
from quorumlog.actors.coordinator.queue_reads import ReadAhead
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.state import (
    CommandError,
    Group,
    GroupError,
    GroupsState,
    Snapshot,
    from_wire,
    snapshot_of,
    to_wire,
)

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor

# Members heartbeat every tenth of their session timeout, at most this long apart: a
# partition freed by a member leaving reaches its next owner within one interval.
HEARTBEAT_INTERVAL_S_MAX = 0.5
HEARTBEAT_INTERVAL_S_MIN = 0.05
# Queue mode: a lease given before this coordinator took over runs this long from then,
# unless its holder said otherwise since.
LEASE_S_DEFAULT = 30.0
MEMBER_ID_CHARS_MAX = 200


class NotMember(Exception):
    """The caller is not (or no longer) a member of the group: it must rejoin."""


@dataclass(slots=True)
class Leasing:
    """Queue mode, one group and partition: the offsets of the leases submitted and not
    yet applied, and the first fresh offset after them, so that the next lease is decided
    before they commit without handing out the same record twice."""

    offsets: set[int]
    next: int


@dataclass(slots=True)
class Session:
    last_seen: float
    timeout_s: float
    # The partitions the member last said it consumes; None: not heard from since this
    # coordinator took over, so it may still consume anything it was given before.
    owned: frozenset[TopicPartition] | None
    lease_timeout_s: float = 30.0  # queue mode: as the member's calls say (LEASE_S_DEFAULT)


GROUPS = Machine(
    new_state=lambda whole: GroupsState(whole=whole),
    from_wire=from_wire,
    to_wire=to_wire,
    snapshot_of=snapshot_of,
    is_snapshot=lambda command: isinstance(command, Snapshot),
    errors=(CommandError,),
)


class Coordination(CommandLog):
    """One `__groups` partition as its replica here applies it, and the sessions of its
    groups' members while that replica leads."""

    def __init__(self, replica: ReplicaActor, partition: int):
        super().__init__(replica, partition, GROUPS)
        self.sessions: dict[str, dict[str, Session]] = {}  # group -> member -> session
        self.locks: dict[str, trio.Lock] = {}  # group -> one membership change at a time
        self.rotation = 0  # queue mode: the partition a lease call looks at first
        # queue mode: (group, topic partition, offset) -> when its lease runs out
        self.lease_deadlines: dict[tuple[str, TopicPartition, int], float] = {}
        # queue mode: leases submitted and not yet applied (the window learns them then)
        self.leasing: dict[tuple[str, TopicPartition], Leasing] = {}
        self.read_ahead: dict[tuple[str, TopicPartition], ReadAhead] = {}
        self.counting = trio.Lock()  # actors/coordinator/offsets_upgrade.py, once

    def take_over(self, now: float) -> None:
        """This replica leads in a new term: every member gets a fresh session."""
        super().take_over(now)
        self.leasing = {}
        self.read_ahead = {}
        self.sessions = {
            name: {m: Session(now, ms / 1000, None) for m, ms in group.members.items()}
            for name, group in self.state.groups.items()
        }

    def is_current(self) -> bool:
        """Led here, applied up to this term, its offsets counted as records."""
        return super().is_current() and self.state.records

    def note_leased(
        self, name: str, member: str, tp: TopicPartition, offsets: tuple[int, ...]
    ) -> None:
        """Queue mode: when the leases just given run out."""
        session = self.sessions.get(name, {}).get(member)
        deadline = trio.current_time() + (session.lease_timeout_s if session else LEASE_S_DEFAULT)
        for o in offsets:
            self.lease_deadlines[(name, tp, o)] = deadline

    def lock(self, name: str) -> trio.Lock:
        return self.locks.setdefault(name, trio.Lock())

    def free_for(self, group: Group, member: str, tp: TopicPartition) -> bool:
        """Whether `member` may consume `tp` now: no other member consumes it, as far as
        this coordinator knows."""
        sessions = self.sessions.get(group.name, {})
        for other in group.members:
            if other == member:
                continue
            session = sessions.get(other)
            if session is None or session.owned is None or tp in session.owned:
                return False
        return True


def member_id(args: dict) -> str:
    member = args["member"]
    if not isinstance(member, str) or not 1 <= len(member) <= MEMBER_ID_CHARS_MAX:
        raise GroupError(f"a member id has 1-{MEMBER_ID_CHARS_MAX} characters")
    return member


def membership(c: Coordination, name: str, member: str) -> tuple[Group, Session]:
    """The group and the session of one of its members; NotMember if it is not one."""
    group = c.state.groups.get(name)
    session = c.sessions.get(name, {}).get(member)
    if group is None or member not in group.members or session is None:
        raise NotMember(f"member {member!r} is not in the group {name!r}: rejoin")
    return group, session


def heartbeat_interval_s(session_timeout_s: float) -> float:
    return max(HEARTBEAT_INTERVAL_S_MIN, min(HEARTBEAT_INTERVAL_S_MAX, session_timeout_s / 10))
