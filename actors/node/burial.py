"""Replicas moved off this node are deleted once their group no longer counts them.

A move (actors/cluster/mover.py) leaves the old replica idle on its node. Deleted while its group
still counted it (the change leaving it out not yet committed), the group could lose an
acknowledgement it relied on; so every CHECK_S this node asks the partition's leader for
the nodes its group counts or may count (the configuration in effect and the last
committed), and only once neither holds this node does it lay a tombstone
(actors/services/tombstones.py): the log goes, the term and vote stay.

A node removed from the cluster no longer learns where its replicas went (the controller's
log stops reaching it), so it asks about every replica it holds but `default`'s (which
follows membership): the leader its replica last knew, else its leader table's, passes the
question on to the group's leader if it no longer leads (a `relay` call: actors/cluster/admin_calls.py).
A replica it still leads stays until a move makes it step down.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import structlog
import trio

from quorumlog.actors.cluster.leader_calls import ASK_S
from quorumlog.actors.cluster.member import ClusterMember
from quorumlog.controller.state import DEFAULT_TOPIC
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import AdminReply, AdminRequest

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor


@runtime_checkable
class BurialHost(ClusterMember, Protocol):
    """What burial needs of its node (a `Node` is one): its replicas, which are moved off,
    and the means to bury one."""

    partitions: Mapping[tuple[str, int], ReplicaActor]

    def moved_off(self, key: tuple[str, int]) -> bool: ...

    async def bury_partition(self, key: tuple[str, int]) -> None: ...


logger = structlog.get_logger("quorumlog.burial")

CHECK_S = 5.0


async def bury_moved_replicas(node: BurialHost) -> None:
    while True:
        await trio.sleep(CHECK_S)
        if node.is_member():
            keys = [key for key in node.partitions if node.moved_off(key)]
        else:
            keys = [key for key in node.partitions if key[0] != DEFAULT_TOPIC]
        for key in keys:
            if await _left_out(node, key):
                await node.bury_partition(key)


async def _left_out(node: BurialHost, key: tuple[str, int]) -> bool:
    """Whether the partition's leader says its group counts this node no more."""
    group = node.partitions[key]
    leader = group.view.leader_id
    if leader is None or leader == node.id:
        leader = node.controller_actor.leader_hint(*key)
    if leader is None or leader == node.id:
        return False
    request = AdminRequest("group_members", {"group": group.group_id, "relay": True})
    with trio.move_on_after(ASK_S):
        try:
            reply = await node.request(leader, request)
        except ConnectionClosed:
            return False
        return isinstance(reply, AdminReply) and node.id not in reply.result["members"]
    return False
