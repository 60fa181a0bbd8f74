"""Replicas moved off this node are deleted once their group no longer counts them.

A move (actors/mover.py) leaves the old replica idle on its node. Deleted while its group
still counted it (the change leaving it out not yet committed), the group could lose an
acknowledgement it relied on; so every CHECK_S this node asks the partition's leader for
the nodes its group counts or may count (the configuration in effect and the last
committed), and only once neither holds this node does it lay a tombstone
(actors/tombstones.py): the log goes, the term and vote stay. A node removed from the
cluster no longer learns where its replicas went and deletes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
import trio

from quorumlog.actors.leader_calls import ASK_S
from quorumlog.controller.state import DEFAULT_TOPIC
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import AdminReply, AdminRequest

if TYPE_CHECKING:
    from quorumlog.actors.node import Node

logger = structlog.get_logger("quorumlog.burial")

CHECK_S = 5.0


async def bury_moved_replicas(node: Node) -> None:
    while True:
        await trio.sleep(CHECK_S)
        if not node.is_member():
            continue
        for key in moved_off(node):
            if await _left_out(node, key) and key in node.partitions:
                await node.bury_partition(key)


def moved_off(node: Node) -> list[tuple[str, int]]:
    """This node's replicas of partitions the controller places elsewhere now."""
    state = node.controller_actor.state
    found = []
    for key, group in node.partitions.items():
        topic = state.topics.get(key[0])
        if key[0] == DEFAULT_TOPIC or topic is None or not 0 <= key[1] < len(topic.partitions):
            continue
        placed = topic.partitions[key[1]]
        if placed.group_id == group.group_id and node.id not in placed.replicas:
            found.append(key)
    return found


async def _left_out(node: Node, key: tuple[str, int]) -> bool:
    """Whether the partition's leader says its group counts this node no more."""
    leader = node.controller_actor.leader_hint(*key)
    if leader is None or leader == node.id:
        return False
    request = AdminRequest("group_members", {"group": node.partitions[key].group_id})
    with trio.move_on_after(ASK_S):
        try:
            reply = await node.request(leader, request)
        except ConnectionClosed:
            return False
        return isinstance(reply, AdminReply) and node.id not in reply.result["members"]
    return False
