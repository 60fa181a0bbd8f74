"""Replica moves, driven by the controller's leader.

When a node leaves the cluster (`members remove`, `replace` or `set` changed the
controller's voters), every partition with a replica on it gets a new replica set: the
departed replica is replaced in its place by the live node with the fewest replicas
(`controller.placement.replace_departed`), and the controller appends the new set
(`SetReplicas`, which bumps the partition's revision). Every node applies it: a node new to
the set creates an empty replica that waits to be added (it joins; it never bootstraps).

Then the controller's leader drives each moved partition's group to its new set with the
membership machinery every group has: a `set_members` call on the partition's leader
(new members as staged learners, caught up, then joint consensus C(old,new) and C(new);
a leader that is left out hands its leadership over first). The call is marked `retry`, so
asking again is free once the group is there: a new controller leader asks again for every
partition ever moved and learns at once which are done. A replica moved away stays on its
node, idle, until its group no longer counts it (actors/node/burial.py deletes it then).

The same call keeps `default` on the cluster's membership when a membership call was cut
short between its two steps (`_follow_membership`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog
import trio

from quorumlog.actors.cluster.admin_calls import RETRY_LATER, handle_admin
from quorumlog.actors.replica.commands import PassBack
from quorumlog.controller.commands import SetReplicas
from quorumlog.controller.placement import replace_departed
from quorumlog.controller.state import DEFAULT_TOPIC, ClusterState, Partition, TopicError
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import AdminReply, AdminRequest, ErrorReply, Message

if TYPE_CHECKING:
    from quorumlog.actors.cluster.controller import ControllerActor
    from quorumlog.actors.cluster.member import ClusterMember

logger = structlog.get_logger("quorumlog.mover")

MOVES_AT_ONCE = 4  # groups catching a new replica up at the same time
MOVE_TIMEOUT_S = 60.0  # one group's change: more than the catch-up wait, which rolls back
MOVE_RECHECK_S = 30.0
PASS_INTERVAL_S = 0.2  # at most this often, and at least every MOVE_CHECK_S
MOVE_CHECK_S = 2.0
RETRY_AFTER_S = (1.0, 30.0)  # a move that did not finish is asked again, backing off
DEFAULT_BEHIND_S = 5.0  # `default` behind the controller's voters this long: driven to them
# Who leads a group is asked of every candidate at once; one that answers nothing within
# this is passed over (a node that is gone or cut off would hold a move for the call's
# whole wait, MOVE_TIMEOUT_S, each in turn).
PROBE_S = 2.0
LEADER_ROUNDS_MAX = 4  # rounds of asking who leads, following the leaders replies name


class ReplicaMover:
    def __init__(self, node: ClusterMember):
        self.node = node
        self._limiter = trio.CapacityLimiter(MOVES_AT_ONCE)
        # partition -> (revision, scope) of the drive under way, cancelled if moved again
        self._moving: dict[tuple[str, int], tuple[int, trio.CancelScope]] = {}
        # partition -> (revision its group was found at, when)
        self._settled: dict[tuple[str, int], tuple[int, float]] = {}
        self._backoff_s: dict[tuple[str, int], float] = {}
        self._default_behind: tuple[dict[str, str], float] | None = None  # target, since
        self._default_drive = False
        self._term = -1  # the controller term this node last led in, and since when
        self._leading_since = 0.0
        self.progressed = trio.Event()  # set (and replaced) when a group reaches its set

    @property
    def controller(self) -> ControllerActor:
        return self.node.controller_actor

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                if self.controller.is_current():
                    if self.settled_in(self.controller.group.view.term):
                        with contextlib.suppress(PassBack):  # leadership moved: the next goes on
                            await self._replace_departed()
                        self._follow_membership(nursery)
                    self._drive_moved(nursery)
                else:
                    for _, scope in self._moving.values():
                        scope.cancel()  # a deposed leader's drives could undo a newer move
                await trio.sleep(PASS_INTERVAL_S)
                with trio.move_on_after(MOVE_CHECK_S):
                    await self.controller.changed.wait()

    def _follow_membership(self, nursery: trio.Nursery) -> None:
        """`default` follows the cluster's membership: a membership call changes the
        controller's group, then `default`'s, and one cut short between the two (a
        timeout, a kill) leaves `default` behind, where every later call would fail.
        Behind for DEFAULT_BEHIND_S with the same target (a call's own second step has had
        its chance by then), `default` is given the controller's voters by the same
        idempotent `set_members` a move uses."""
        if self._default_drive:
            return
        wanted = self._default_target()
        now = trio.current_time()
        if wanted is None or self._default_behind is None or self._default_behind[0] != wanted:
            self._default_behind = None if wanted is None else (wanted, now)
            return
        if now - self._default_behind[1] >= DEFAULT_BEHIND_S:
            self._default_behind = None
            self._default_drive = True
            nursery.start_soon(self._drive_default, wanted)

    def _default_target(self) -> dict[str, str] | None:
        """The controller's voters, if `default` (as this node sees it) has others, or
        learners the controller's group does not have (one staged by a call cut short
        before it was promoted, one left by a removal cut short), and neither group is in
        the middle of a joint change nor the controller's group has learners of its own.
        A copy of `default` that knows no leader is not trusted: this node may have been
        removed from it, and then its copy stops at the last configuration it was sent
        (seed 30311: it still listed this node, so `default` was never given it back)."""
        wanted = self.controller.group.view.committed_config
        default = self.node.default_group.view
        here = default.config
        if wanted is None or wanted.is_joint or wanted.learners:
            return None
        if (
            here is not None
            and default.leader_id is not None
            and (here.is_joint or (here.voters == wanted.voters and not here.learners))
        ):
            return None
        return {str(n): wanted.addresses[n] for n in sorted(wanted.voters)}

    async def _drive_default(self, members: dict[str, str]) -> None:
        try:
            logger.warning("default_behind_membership", members=members)
            request = AdminRequest(
                "set_members",
                {
                    "group": self.node.default_group.group_id,
                    "members": members,
                    "retry": True,
                    "timeout_s": MOVE_TIMEOUT_S,
                },
            )
            here = self.node.default_group.view.config
            replicas = {int(n) for n in members} | (set(here.voters) if here else set())
            reply = await self._on_leader(DEFAULT_TOPIC, 0, sorted(replicas), request)
            logger.info("default_follows_membership", reply=str(reply))
        finally:
            self._default_drive = False

    def settled_in(self, term: int) -> bool:
        """Whether this controller leader has led long enough to know who is live: every
        live broker answers its heartbeats within LIVE_BEATS intervals, but only once it
        heard of the new leader. Before that, a departed replica would go to the leader
        itself, or be dropped for want of a live broker."""
        now = trio.current_time()
        if self._term != term:
            self._term, self._leading_since = term, now
        return now - self._leading_since >= 2 * self.node.settings.election_timeout_max_s

    async def _replace_departed(self) -> None:
        """New replica sets for the partitions with replicas on departed nodes."""
        state = self.controller.state
        sets = {
            (t.name, p.partition): p.replicas
            for t in state.topics.values()
            if t.name != DEFAULT_TOPIC
            for p in t.partitions
        }
        leaders = {
            key: entry.leader_id for key in sets if (entry := self.controller.leaders.get(*key))
        }
        moves = replace_departed(sets, state.brokers, self.controller.live_brokers(), leaders)
        for (topic, partition), replicas in sorted(moves.items()):
            logger.info(
                "replicas_moving", topic=topic, partition=partition, replicas=list(replicas)
            )
            await self.controller.propose(SetReplicas(topic, partition, replicas))

    def _drive_moved(self, nursery: trio.Nursery) -> None:
        state = self.controller.state
        for key in [
            k for k in self._settled.keys() | self._backoff_s.keys() if not _exists(state, k)
        ]:
            self._settled.pop(key, None)
            self._backoff_s.pop(key, None)
        for topic in state.topics.values():
            if topic.name == DEFAULT_TOPIC:
                continue
            for p in topic.partitions:
                key = (p.topic, p.partition)
                if not state.was_moved(p) or self._settled_lately(key, p.revision):
                    continue
                under_way = self._moving.get(key)
                if under_way is not None:
                    if under_way[0] != p.revision:
                        under_way[1].cancel()  # superseded: the next pass drives the new set
                    continue
                if all(n in state.brokers for n in p.replicas):
                    self._moving[key] = (p.revision, trio.CancelScope())
                    nursery.start_soon(self._drive, p)

    def settled(self, p: Partition) -> bool:
        """Whether `p`'s group is known to be on its replica set: never moved, or found
        there at this revision (by this node, since it leads the controller: a new leader
        asks every moved group again at once)."""
        settled = self._settled.get((p.topic, p.partition))
        return not self.controller.state.was_moved(p) or (
            settled is not None and settled[0] == p.revision
        )

    def _settled_lately(self, key: tuple[str, int], revision: int) -> bool:
        """Whether the group was found at this revision's set within MOVE_RECHECK_S: a
        change made by an earlier controller leader can land after a later one's, so
        moved partitions are asked again now and then (free when they are right)."""
        settled = self._settled.get(key)
        return (
            settled is not None
            and settled[0] == revision
            and trio.current_time() - settled[1] < MOVE_RECHECK_S
        )

    async def _drive(self, p: Partition) -> None:
        """Bring the partition's group to its replica set, through its leader."""
        key = (p.topic, p.partition)
        try:
            with self._moving[key][1]:
                await self._drive_now(p)
        finally:
            del self._moving[key]

    async def _drive_now(self, p: Partition) -> None:
        key = (p.topic, p.partition)
        async with self._limiter:
            members = self._members(p)
            if members is None or not self.controller.is_current():
                return  # moved again, deleted or no longer leading: the next pass sees it
            request = AdminRequest(
                "set_members",
                {
                    "group": p.group_id,
                    "members": members,
                    "revision": p.revision,
                    "retry": True,
                    "timeout_s": MOVE_TIMEOUT_S,
                },
            )
            reply = await self._on_leader(p.topic, p.partition, p.replicas, request)
        if isinstance(reply, AdminReply):
            if key not in self._settled or self._settled[key][0] != p.revision:
                logger.info(
                    "replicas_moved", topic=p.topic, partition=p.partition, replicas=members
                )
            self._settled[key] = (p.revision, trio.current_time())
            self._backoff_s.pop(key, None)
            self.progressed.set()
            self.progressed = trio.Event()
            return
        backoff_s = self._backoff_s.get(key, RETRY_AFTER_S[0])
        self._backoff_s[key] = min(2 * backoff_s, RETRY_AFTER_S[1])
        logger.warning(
            "replica_move_waits",
            topic=p.topic,
            partition=p.partition,
            reply=None if reply is None else str(reply),
            retry_in_s=backoff_s,
        )
        await trio.sleep(backoff_s)

    def _members(self, p: Partition) -> dict[str, str] | None:
        """The set to drive `p`'s group to, if the state still places it so."""
        state = self.controller.state
        try:
            now = state.partition(p.topic, p.partition)
        except TopicError:
            return None
        if now.revision != p.revision or any(n not in state.brokers for n in p.replicas):
            return None
        return {str(n): state.brokers[n].address for n in p.replicas}

    async def _on_leader(
        self, topic: str, partition: int, replicas: Sequence[int], request: AdminRequest
    ) -> Message | None:
        """`request` answered by the partition's leader, found from the leader table and
        the replicas' hints, and last from the nodes that left: a removed node leads its
        groups until they move, and where none of the new replicas was a member (a
        partition of one replica on it) no one else can name it (seed 10023); None if none
        of them would take it now.

        Who leads is asked first (`_who_leads`: every candidate at once, each for at most
        PROBE_S), and the call goes only to a node that says it leads: a node that is gone
        or cut off, a departed one most often, costs PROBE_S, not the call's whole wait
        (seed 77017 waited 65 s on a removed node while the group elected a leader).

        Both go marked `relay`: a replica that does not lead passes them on to the leader
        it knows (actors/cluster/admin_calls.py), since this node links only to the nodes it shares a
        group with, and a removed node that leads may share none (seed 77020)."""
        request = AdminRequest(request.op, {**request.args, "relay": True})
        group_id = int(request.args["group"])
        hint = self.controller.leader_hint(topic, partition)
        state = self.controller.state
        departed = sorted(n for n in state.addresses if n not in state.brokers)
        candidates = [n for n in (hint, *replicas, *departed) if n is not None]
        for _ in range(LEADER_ROUNDS_MAX):
            nodes = list(dict.fromkeys(candidates))
            found = await self._who_leads(group_id, nodes)
            candidates = [named for _, named in found.values() if named is not None]
            leading = [n for n in nodes if found[n][0]]
            if not leading:
                if set(candidates) <= set(nodes):
                    return None  # an election, or a leader no one here can reach
                continue  # ask the leaders they named
            reply = await self._ask(leading[0], request)
            if not (isinstance(reply, ErrorReply) and reply.code in RETRY_LATER):
                return reply
            # Leadership moves (STEPPING_DOWN names the node it hands over to): who leads
            # is asked again once the handover can have happened.
            if reply.leader_id is not None:
                candidates.insert(0, reply.leader_id)
            candidates += nodes
            await trio.sleep(self.node.settings.election_timeout_max_s)
        return None

    async def _who_leads(
        self, group_id: int, nodes: Sequence[int]
    ) -> dict[int, tuple[bool, int | None]]:
        """For each node: whether it leads the group (or relays to the node that does),
        and the leader it names otherwise. A node that does not answer within PROBE_S
        leads nothing and names no one."""
        found: dict[int, tuple[bool, int | None]] = {n: (False, None) for n in nodes}

        async def probe(node_id: int) -> None:
            request = AdminRequest(
                "group_members", {"group": group_id, "relay": True, "timeout_s": PROBE_S}
            )
            with trio.move_on_after(PROBE_S):
                reply = await self._send(node_id, request)
                if isinstance(reply, AdminReply):
                    found[node_id] = (True, None)
                elif isinstance(reply, ErrorReply):
                    found[node_id] = (False, reply.leader_id)

        async with trio.open_nursery() as nursery:
            for node_id in nodes:
                nursery.start_soon(probe, node_id)
        return found

    async def _ask(self, node_id: int, request: AdminRequest) -> Message | None:
        with trio.move_on_after(MOVE_TIMEOUT_S + 5):
            return await self._send(node_id, request)
        return None

    async def _send(self, node_id: int, request: AdminRequest) -> Message | None:
        if node_id == self.node.id:
            return await handle_admin(self.node, request)
        try:
            return await self.node.request(node_id, request)
        except ConnectionClosed:
            return None


def _exists(state: ClusterState, key: tuple[str, int]) -> bool:
    topic = state.topics.get(key[0])
    return topic is not None and key[1] < len(topic.partitions)
