"""Rebalancing onto new nodes, driven by the controller's leader.

A node that joins gets replicas of the topics created after it, and nothing else: this
moves existing replicas onto it. A rebalance starts when the brokers include one that the
last rebalance did not balance over (a join, seen from the state, so a new controller
leader sees it too) or when asked (`quorumlog cluster rebalance`); both append
`StartRebalance`. While one is under way, each pass takes the next changes from
`controller.balance.rebalance_step` and appends them as `SetReplicas`: at most
`rebalance_moves_max` replica moves under way at once (moves of any origin count: each
copies a partition's log to a new node beside the clients' traffic), then preferred
leaders (reordered sets; actors/node/leader_balance.py then hands leadership over). The mover
(actors/cluster/mover.py) drives each group to its new set; a move is under way until the mover
has found its group there. When no change is left and none is under way, `EndRebalance`
records the brokers it balanced over.

Everything it needs is in the controller's state and the mover's view of the groups, so a
new controller leader continues where the old one stopped. It moves nothing while a
broker is not live (never onto a node that is down; and an uneven count against a node
that is down is not an imbalance to fix) or while a partition still has a replica on a
departed node (`replace_departed` moves those first), and never touches a partition with a
move under way. An operator's own placement (`partition move`, `topic alter --replicas`)
stops a rebalance under way: it would otherwise move those replicas again.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import structlog
import trio

from quorumlog.actors.replica.commands import PassBack
from quorumlog.controller.balance import (
    is_replica_move,
    moves_left,
    rebalance_plan,
    rebalance_step,
)
from quorumlog.controller.commands import EndRebalance, SetReplicas, StartRebalance
from quorumlog.controller.state import DEFAULT_TOPIC, ClusterState
from quorumlog.transport.messages import AdminReply, Message

if TYPE_CHECKING:
    from quorumlog.actors.cluster.controller import ControllerActor
    from quorumlog.actors.cluster.mover import ReplicaMover
    from quorumlog.raft.settings import RaftSettings

logger = structlog.get_logger("quorumlog.rebalancer")

PASS_INTERVAL_S = 0.2  # at most this often, and at least every CHECK_S
CHECK_S = 1.0


def balanced_sets(state: ClusterState) -> dict[tuple[str, int], tuple[int, ...]]:
    """The replica sets a rebalance spreads: every topic's but `default`'s, which has one
    replica on every node and follows membership. `__groups` is spread like the rest: its
    partitions host the consumer groups' coordinators, and moves of them are the same
    moves `replace_departed` makes when a node leaves."""
    return {
        (t.name, p.partition): p.replicas
        for t in state.topics.values()
        if t.name != DEFAULT_TOPIC
        for p in t.partitions
    }


class Rebalancer:
    def __init__(self, controller: ControllerActor, mover: ReplicaMover, settings: RaftSettings):
        self.controller = controller
        self.mover = mover
        self.settings = settings

    async def run(self) -> None:
        while True:
            ctl = self.controller
            acted = False
            if ctl.is_current():
                with contextlib.suppress(PassBack):  # leadership moved: the next goes on
                    acted = await self._pass()
            await trio.sleep(PASS_INTERVAL_S)
            if not acted:  # what it appended was applied already: no change to wait for
                await _wait_either(ctl.changed, self.mover.progressed, CHECK_S)

    async def _pass(self) -> bool:
        """One look at the state, and the commands it calls for; whether it appended any."""
        ctl = self.controller
        state = ctl.state
        mark = state.rebalance
        brokers = tuple(sorted(state.brokers))
        if not mark.under_way:
            if mark.brokers is None:  # a new cluster (or one from before rebalancing)
                await ctl.propose(EndRebalance(brokers))
                return True
            if joined := sorted(set(brokers) - set(mark.brokers)):
                reason = f"node {', '.join(map(str, joined))} joined"
                logger.info("rebalance_starts", reason=reason)
                await ctl.propose(StartRebalance(reason))
                return True
            return False
        if not self.mover.settled_in(ctl.group.view.term) or self.waiting(state):
            return False
        busy = self._busy(state)
        sets = balanced_sets(state)
        window = self.settings.rebalance_moves_max - len(busy)
        step = rebalance_step(sets, brokers, ctl.live_brokers(), window, busy)
        for key, replicas in sorted(step.items()):
            if not state.rebalance.under_way or balanced_sets(state).get(key) != sets[key]:
                return True  # stopped, or changed meanwhile: the next pass looks again
            logger.info(
                "rebalance_move" if is_replica_move(sets[key], replicas) else "rebalance_leader",
                topic=key[0],
                partition=key[1],
                replicas=list(replicas),
                was=list(sets[key]),
            )
            await ctl.propose(SetReplicas(*key, replicas))
        if not step and not busy:
            logger.info("rebalance_ends", brokers=list(brokers))
            await ctl.propose(EndRebalance(brokers))
        return bool(step) or not busy

    def _busy(self, state: ClusterState) -> set[tuple[str, int]]:
        """The partitions with a move under way (theirs or anyone's)."""
        mover = self.mover
        return {
            (t.name, p.partition)
            for t in state.topics.values()
            if t.name != DEFAULT_TOPIC
            for p in t.partitions
            if not mover.settled(p)
        }

    def waiting(self, state: ClusterState) -> str | None:
        """Why a rebalance under way makes no move now, if it does not."""
        down = sorted(set(state.brokers) - set(self.controller.live_brokers()))
        if down:
            return f"node {', '.join(map(str, down))} is not live"
        if any(n not in state.brokers for s in balanced_sets(state).values() for n in s):
            return "replicas of departed nodes are being replaced"
        return None

    def progress(self) -> dict[str, Any]:
        """Where rebalancing stands, for `status` and `cluster rebalance` (on the
        controller's leader): state idle (not balanced, none under way), moving or
        balanced; changes done since the last began (partitions whose groups reached a set
        given since), about how many are left (the fewest possible, and those under way),
        and each node's replicas and preferred leaderships."""
        state = self.controller.state
        mark = state.rebalance
        sets = balanced_sets(state)
        busy = self._busy(state)
        until = state.applied_offset if mark.under_way else mark.ended_offset
        done = sum(
            1
            for t in state.topics.values()
            for p in t.partitions
            if t.name != DEFAULT_TOPIC
            and state.was_moved(p)
            and mark.started_offset >= 0
            and mark.started_offset < p.revision <= until
            and (t.name, p.partition) not in busy
        )
        balanced = not rebalance_step(sets, state.brokers, state.brokers, 1, reorders_max=1)
        name = "moving" if mark.under_way else "balanced" if balanced else "idle"
        replicas = {str(n): 0 for n in sorted(state.brokers)}
        leaders = dict(replicas)
        for s in sets.values():
            for n in s:
                replicas[str(n)] = replicas.get(str(n), 0) + 1
            if s:
                leaders[str(s[0])] = leaders.get(str(s[0]), 0) + 1
        return {
            "state": name,
            "moves_done": done,
            "moves_left": (moves_left(sets, state.brokers) if not balanced else 0) + len(busy),
            "moves_in_flight": len(busy),
            "reason": mark.reason if mark.under_way else None,
            "waiting": self.waiting(state) if mark.under_way else None,
            "replicas": replicas,
            "leaders": leaders,
        }


async def ask(ctl: ControllerActor, args: dict[str, Any]) -> Message:
    """`cluster rebalance`: start one unless balanced or under way (`start`: False only
    asks how far it is), and say what it will change from here."""
    rebalancer = ctl.node.rebalancer
    if args.get("start", True) and rebalancer.progress()["state"] == "idle":
        await ctl.propose(StartRebalance("asked"))  # lost a race to a join: under way anyway
    result = rebalancer.progress()
    if args.get("start", True):
        state = ctl.state
        sets, brokers = balanced_sets(state), sorted(state.brokers)
        # In a thread: thousands of partitions take a good part of a second.
        plan = await trio.to_thread.run_sync(rebalance_plan, sets, brokers, brokers)
        result["plan"] = [
            {"topic": key[0], "partition": key[1], "from": list(old), "to": list(new)}
            for key, old, new in plan
        ]
    return AdminReply(result)


async def give_way(ctl: ControllerActor, why: str) -> None:
    """An operator placed replicas by hand (`partition move`, `topic alter --replicas`):
    a rebalance under way stops, rather than move them again once they are there (the
    operator asks again with `cluster rebalance`)."""
    if ctl.state.rebalance.under_way:
        logger.info("rebalance_stopped", why=why)
        await ctl.propose(EndRebalance(tuple(sorted(ctl.state.brokers))))


async def _wait_either(first: trio.Event, second: trio.Event, timeout_s: float) -> None:
    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:

            async def wait(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait, first)
            nursery.start_soon(wait, second)
