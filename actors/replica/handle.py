"""What everyone outside a replica's task may use of it: the view its last round published,
a wait for a view that satisfies a predicate, and the requests it takes (a configuration
change, a leadership transfer, a back-fill, and the waits for their progress).

The replica's task alone touches its Raft core (actors/replica/actor.py). Admin calls,
ReadIndex, the controller, the balancer, the coordinators and the Kafka fetch path read
`view` and wait with `wait_until`; a request runs in the replica's task, once (`in_task`) or
after every round until it answers (`in_task_when`): both travel through the mailbox, so the
core never changes under a reader's feet and a reader never sees a state the round has not
finished. Only this package runs functions on the core.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import trio

from quorumlog.actors.replica.mailbox import CoreCall, Pending
from quorumlog.membership.changes import (
    ChangeInProgressError,
    ConfigChangeError,
    check_can_change,
)
from quorumlog.membership.config import Configuration
from quorumlog.raft.core import RaftCore
from quorumlog.raft.roles import Role

T = TypeVar("T")


class LeadershipLost(Exception):
    """This replica stopped leading while a request needed it to lead."""


@dataclass(frozen=True, slots=True)
class GroupView:
    """One replica as its last round left it."""

    node_id: int
    term: int
    role: Role
    leader_id: int | None
    commit_offset: int
    # An entry of this leader's term is committed (its barrier): its commit offset covers
    # everything committed before it (False for a follower).
    settled: bool
    serves_clients: bool  # leads and may answer clients (a witness leading does not)
    config: Configuration | None  # in effect (the latest in the log)
    committed_config: Configuration | None
    # Where `committed_config` sits in the group's log: the order of committed
    # configurations, the same on every replica (I2; actors/cluster/removal.py compares them).
    committed_config_offset: int
    transfer_to: int | None  # a leadership transfer under way, to this node
    quiet: bool  # idle: no timers run (raft/core.py `quiesce`)
    elections_started: int
    recovery_bytes_sent: int  # to lagging followers, as leader

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER


def view_of(core: RaftCore) -> GroupView:
    return GroupView(
        node_id=core.id,
        term=core.term,
        role=core.role,
        leader_id=core.leader_id,
        commit_offset=core.commit_offset,
        settled=core.is_leader and core.term_at(core.commit_offset) == core.term,
        serves_clients=core.serves_clients,
        config=core.config,
        committed_config=core.configs.committed,
        committed_config_offset=core.configs.committed_offset,
        transfer_to=None if core.transfer is None else core.transfer[0],
        quiet=core.quiet,
        elections_started=core.elections_started,
        recovery_bytes_sent=core.recovery_bytes_sent,
    )


def view_key(core: RaftCore) -> tuple:
    """What the view is made of, cheaply: a round that changes none of it publishes none."""
    return (
        core.term,
        core.role,
        core.leader_id,
        core.commit_offset,
        core.config,
        core.configs.committed,
        core.configs.committed_offset,
        core.transfer,
        core.quiet,
        core.elections_started,
        core.recovery_bytes_sent,
    )


class ReplicaHandle:
    """The outside of a group actor (actors/replica/actor.py subclasses it)."""

    _inbox: trio.MemorySendChannel

    def __init__(self, core: RaftCore) -> None:
        self._view_key = view_key(core)
        self.view = view_of(core)
        self._view_changed = trio.Event()
        self._watches: list[tuple[Callable[[RaftCore], Any], Pending]] = []
        self._answers: list[tuple[Pending, Any, Exception | None]] = []

    def run_call(self, call: CoreCall, core: RaftCore) -> None:
        """In the group's task: a call's function; its caller gets the answer with the view
        of the round that ran it."""
        try:
            self._answers.append((call.reply, call.fn(core), None))
        except Exception as exc:  # handed to the caller, who answers the client
            self._answers.append((call.reply, None, exc))

    def publish(self, core: RaftCore) -> None:
        """End of a round, in the group's task: a new view if anything in it changed, the
        calls it ran answered, and the watches now satisfied."""
        key = view_key(core)
        if key != self._view_key:
            self._view_key = key
            self.view = view_of(core)
            self._view_changed.set()
            self._view_changed = trio.Event()
        if self._answers:
            for reply, value, error in self._answers:
                if error is None:
                    reply.resolve(value)
                else:
                    reply.fail(error)
            self._answers = []
        if self._watches:
            self._watches = [w for w in self._watches if not _answered(w, core)]

    async def wait_until(self, predicate: Callable[[GroupView], bool]) -> GroupView:
        """The first published view for which `predicate` holds (the current one if it does)."""
        while not predicate(view := self.view):
            await self._view_changed.wait()
        return view

    async def changed(self, seen: GroupView) -> GroupView:
        """The next view after `seen` (at once if one was published since)."""
        return await self.wait_until(lambda view: view is not seen)

    # ------------------------------------------------------------------- requests

    async def change_config(
        self, build: Callable[[Configuration], Configuration]
    ) -> tuple[int, int]:
        """Append the configuration `build` makes of the one in effect, as its leader, one
        change at a time; returns (term, offset) of the change (committed later)."""

        def propose(core: RaftCore) -> tuple[int, int]:
            if core.transfer is not None:
                raise ChangeInProgressError("a leadership transfer is under way")
            if core.is_leader and core.term_at(core.commit_offset) != core.term:
                # Raft's rule for changes one at a time (dissertation, 4.1 errata): a new
                # leader's commit offset may not yet cover what its predecessor committed
                # (a witness would start its log too early); its term's barrier commits soon.
                raise ChangeInProgressError("the leader has not committed an entry of its term")
            check_can_change(core.config, core.configs.committed)
            return core.term, core.propose_config(build(core.config))

        return await self.in_task(propose)

    async def wait_caught_up(self, node_id: int) -> None:
        """Until `node_id` is a voter or a learner close enough to the leader's log to be
        promoted (LeadershipLost if this replica stops leading)."""

        def caught_up(core: RaftCore) -> bool:
            if not core.is_leader:
                raise LeadershipLost
            p = core.progress.get(node_id)
            return core.config.is_voter(node_id) or (p is not None and core.caught_up(p))

        await self.in_task_when(caught_up)

    async def backfill(self, node_id: int) -> None:
        """Copy a follower the records before its log start; returns once its log starts
        where the leader's does (LeadershipLost if this replica stops leading)."""

        def copied(core: RaftCore) -> bool:
            if not core.is_leader:
                raise LeadershipLost
            return core.holds_whole_log(node_id)

        await self.in_task(lambda core: core.start_backfill(node_id))
        await self.in_task_when(copied)

    async def transfer_leadership(self, target: int) -> None:
        """Start moving leadership to `target` (the view says when it moved)."""
        await self.in_task(lambda core: core.transfer_leadership(target))

    async def hand_over(self, candidates: Iterable[int]) -> int:
        """Start moving leadership to the most up-to-date of `candidates`; returns it."""

        def to_most_up_to_date(core: RaftCore) -> int:
            def progress_of(node_id: int) -> tuple[int, int]:
                p = core.progress.get(node_id)
                return (p.match_offset, p.flushed_offset) if p else (-1, -1)

            if not (ordered := sorted(candidates)):
                raise ConfigChangeError("no other voter can take over the leadership")
            target = max(ordered, key=progress_of)
            core.transfer_leadership(target)
            return target

        return await self.in_task(to_most_up_to_date)

    async def hand_to_live_voter(
        self, choose: Callable[[list[int]], int | None] | None = None
    ) -> int | None:
        """Start moving leadership to the voter `choose` picks among the live ones (by
        default the one holding most of the log), if it may lead and no transfer is under
        way; returns it, or None if none started."""

        def to_chosen(core: RaftCore) -> int | None:
            live = core.live_voters()
            if choose is None:
                target = max(live, key=lambda n: core.progress[n].match_offset, default=None)
            else:
                target = choose(live)
            return target if target is not None and core.transfer_to_live_voter(target) else None

        return await self.in_task(to_chosen)

    # ------------------------------------------------------------------- in the task

    async def in_task(self, fn: Callable[[RaftCore], T]) -> T:
        """Run `fn(core)` in the replica's task and return its result (or raise its error)."""
        reply = Pending()
        await self._inbox.send(CoreCall(fn, reply))
        return await reply.wait()

    async def in_task_when(self, fn: Callable[[RaftCore], T]) -> T:
        """`fn(core)` after every round from now on, until it returns something true:
        that (conditions on the core's state beyond the view, as a follower's progress)."""
        reply = Pending()
        # Registered in the replica's task: the round this call makes checks it at once.
        await self.in_task(lambda _core: self._watches.append((fn, reply)))
        try:
            return await reply.wait()
        finally:
            reply.resolve(None)  # a waiter that gave up: the next round drops its watch


def _answered(watch: tuple[Callable[[RaftCore], Any], Pending], core: RaftCore) -> bool:
    fn, reply = watch
    if reply.done:
        return True  # its waiter gave up (cancelled) or was failed
    try:
        value = fn(core)
    except Exception as exc:  # handed to the waiter, as a call's
        reply.fail(exc)
        return True
    if value:
        reply.resolve(value)
    return bool(value)
