"""A node removed from the cluster learns it (issue 45), and says so.

Cluster membership is the controller group's configuration. A node learns its removal
from its own log when the change that leaves it out commits there; usually it does not:
the leader stops replicating to a node in the same step that leaves it out, so the node
keeps the configuration before (Raft dissertation 4.2.2). So a node whose controller
group has no leader, a leader it cannot reach, or a change in flight that leaves it
out, asks the members it knows for the controller's last committed configuration (op
`cluster_config`, answered by any node from its own view), every ASK_S; and every
CHECK_S anyway, since a quiet group runs no timers and may never miss its leader.

An answer proves the removal when its committed configuration comes later in the
controller's log than this node's (the committed prefix is the same everywhere: I2) and
leaves this node out, unless this node holds an uncommitted configuration that keeps it
(a change that may re-add it: it waits and sees). Added back, the node's own
configuration passes the proof's offset and it is a member again.

A removed node says so once in its log, answers `status` with role `removed` and serves
no client (but in a partition it still leads: `Node.replica`). It still campaigns and votes
where its groups' own configurations count it: Raft already keeps a node out of the groups
whose configuration leaves it out (raft/election.py), and a group whose configuration
still counts it may need it to lead. (Keeping it from campaigning in `default`, whose
configuration follows the cluster's only after the mover's change commits there, left
`default` with no leader for good: seed 80027 of the simulation, where the removed node
held the newest log of `default`'s two voters.) It tombstones each replica whose group no
longer counts it, asking the group's leader (actors/node/burial.py), and keeps the rest (a
partition it is the only copy of, `default`'s) until its folder is wiped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import structlog
import trio

from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import AdminReply, AdminRequest

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor
    from quorumlog.actors.replica.handle import GroupView
    from quorumlog.transport.messages import Message

logger = structlog.get_logger("quorumlog.removal")

ASK_S = 0.5  # how often a node that misses its controller's leader asks
CHECK_S = 3.0  # how often any node asks, in case its controller group went quiet
ANSWER_S = 1.0  # how long one peer is waited for
CLUSTER_CONFIG_OP = "cluster_config"


@dataclass(frozen=True, slots=True)
class Proof:
    """A peer's committed cluster configuration that leaves this node out."""

    offset: int  # of that configuration in the controller's log
    members: tuple[int, ...]
    leader_id: int | None
    told_by: int


def cluster_config(view: GroupView) -> dict:
    """What a node answers `cluster_config` with: the controller's committed configuration,
    where it sits in the log, and the controller's leader."""
    committed = view.committed_config
    return {
        "offset": view.committed_config_offset if committed is not None else -1,
        "members": sorted(committed.members) if committed is not None else [],
        "leader_id": view.leader_id,
    }


def removed_by_own_log(node_id: int, view: GroupView) -> bool:
    """The controller's committed configuration, and the one in effect, leave this node out."""
    committed, current = view.committed_config, view.config
    return (
        committed is not None
        and current is not None
        and node_id not in committed.members
        and node_id not in current.members
        and not current.is_joint
    )


def proves_removal(node_id: int, view: GroupView, answer: dict) -> bool:
    """Whether a peer's `cluster_config` answer proves this node removed (module docstring)."""
    offset, members = answer.get("offset", -1), answer.get("members", [])
    if not isinstance(offset, int) or offset <= view.committed_config_offset:
        return False  # not later than what this node committed itself
    if node_id in members or view.committed_config is None:
        return False  # a member, or a node still joining (never was one)
    current = view.config
    kept = current is not None and current != view.committed_config and node_id in current.members
    return not kept


@runtime_checkable
class RemovalHost(Protocol):
    """What the watch needs of its node (a `Node` is one)."""

    id: int
    controller: ReplicaActor  # its replica of the controller group

    def peer_alive(self, peer: int) -> bool: ...

    async def request(self, peer: int, message: Message) -> Message: ...


class RemovalWatch:
    """Whether this node is still a member of the cluster, and the task that asks."""

    def __init__(self, node: RemovalHost) -> None:
        self.node = node
        self.proof: Proof | None = None
        self._said = False  # the removal was logged

    @property
    def removed(self) -> bool:
        view = self.node.controller.view
        if removed_by_own_log(self.node.id, view):
            return True
        proof = self.proof
        if proof is None:
            return False
        if view.committed_config_offset >= proof.offset and not removed_by_own_log(
            self.node.id, view
        ):
            self.proof = None  # added back since: its own log says so
            return False
        return True

    def members(self) -> frozenset[int]:
        """The cluster's members as this node last learned them: those of the answer that
        proved its removal, else of its own controller's committed configuration."""
        if self.proof is not None:
            return frozenset(self.proof.members)
        committed = self.node.controller.view.committed_config
        return frozenset() if committed is None else frozenset(committed.members)

    def what(self) -> dict:
        """For `status`: the controller's configuration this node knows, and whether it
        is removed from it."""
        view = self.node.controller.view
        current = view.config
        out = {
            "removed": self.removed,
            "cluster_config_offset": view.committed_config_offset
            if view.committed_config is not None
            else -1,
            "cluster_members": {
                str(m): a for m, a in sorted((current.addresses if current else {}).items())
            },
        }
        if self.proof is not None and out["removed"]:
            out["removed_by"] = {"offset": self.proof.offset, "members": list(self.proof.members)}
        return out

    async def run(self) -> None:
        last_asked = -CHECK_S
        while True:
            await trio.sleep(ASK_S)
            if self.removed:
                self._say()
                continue
            self._said = False  # a member (again): a later removal is said again
            now = trio.current_time()
            if self._suspicious() or now - last_asked >= CHECK_S:
                last_asked = now
                await self._ask_peers()

    def _suspicious(self) -> bool:
        view = self.node.controller.view
        current = view.config
        if current is None:
            return False  # joining: nobody removed it
        leader = view.leader_id
        return (
            leader is None
            or self.node.id not in current.members
            or (leader != self.node.id and not self.node.peer_alive(leader))
        )

    async def _ask_peers(self) -> None:
        view = self.node.controller.view
        peers = sorted(
            set(view.config.members if view.config else ())
            | set(view.committed_config.members if view.committed_config else ())
        )
        answers: list[tuple[int, dict]] = []

        async def ask(peer: int) -> None:
            with trio.move_on_after(ANSWER_S):
                try:
                    reply = await self.node.request(peer, AdminRequest(CLUSTER_CONFIG_OP, {}))
                except ConnectionClosed:
                    return
                if isinstance(reply, AdminReply):
                    answers.append((peer, reply.result))

        async with trio.open_nursery() as nursery:
            for peer in peers:
                if peer != self.node.id:
                    nursery.start_soon(ask, peer)
        view = self.node.controller.view  # asking took a while
        proofs = [(a, p) for p, a in answers if proves_removal(self.node.id, view, a)]
        if proofs:
            answer, peer = max(proofs, key=lambda pa: pa[0]["offset"])
            self.proof = Proof(
                offset=answer["offset"],
                members=tuple(answer["members"]),
                leader_id=answer.get("leader_id"),
                told_by=peer,
            )

    def _say(self) -> None:
        if self._said:
            return
        self._said = True
        view = self.node.controller.view
        proof = self.proof
        members = sorted(view.committed_config.members) if proof is None else list(proof.members)
        logger.warning(
            "removed_from_cluster",
            node_id=self.node.id,
            members=members,
            told_by=None if proof is None else proof.told_by,
            note="this node serves no client; it deletes the replicas moved off it and keeps "
            "the rest until its folder is wiped",
        )
