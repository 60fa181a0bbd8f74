"""A node's calls on the leader of a partition it may not lead: the coordinator reads,
appends (dead letters) and asks for end offsets this way, and forwards group calls to the
leader of their `__groups` partition.

Whom to ask: the leader as this node's replica sees it, else the controller's leader
table, else the replicas the controller places, in turn (a node that joined or restarted
may know no leader yet; any replica answers or names it). A reply naming a leader is
followed at once.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, TypeVar

import structlog
import trio

from quorumlog.actors.replica.commands import PassBack
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import (
    ErrorCode,
    ErrorReply,
    Message,
    PartitionCall,
)

if TYPE_CHECKING:
    from quorumlog.actors.cluster.member import ClusterMember
    from quorumlog.actors.replica.actor import ReplicaActor

logger = structlog.get_logger("quorumlog.coordinator")

ASK_S = 5.0  # how long a call on a partition's leader is tried
ASK_RETRY_S = 0.05

M = TypeVar("M", bound=Message)


class UnknownTopic(Exception):
    def __init__(self, topic: str, message: str):
        super().__init__(message)
        self.topic = topic


class OutOfRange(Exception):
    """The partition's leader holds no record at the offset asked (a trim or retention
    dropped it): asking again would not help."""


async def ask_partition_leader(
    node: ClusterMember, tp: TopicPartition, message: PartitionCall, answer: type[M]
) -> M:
    """`message` answered by the leader of a topic partition, here or elsewhere, retried
    while leadership moves; UnknownTopic, OutOfRange, or PassBack after ASK_S."""
    hint = None  # the leader the last reply named
    ask: int | None = None
    reply: Message | None = None
    with trio.move_on_after(ASK_S):
        for turn in itertools.count():
            replica = node.replica(*tp)
            if replica is not None and replica.view.is_leader:
                ask = node.id
                reply = await replica.answer(message)
            else:
                ask = hint if hint is not None else leader_of(node, tp, replica, turn)
                reply = await ask_node(node, ask, message)
            if isinstance(reply, answer):
                return reply
            hint = None
            if isinstance(reply, ErrorReply):
                if reply.code is ErrorCode.UNKNOWN_TOPIC and reply.leader_id is None:
                    raise UnknownTopic(tp[0], reply.message)
                if reply.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise OutOfRange(reply.message)
                hint = reply.leader_id
            await trio.sleep(ASK_RETRY_S)
    logger.warning(
        "partition_leader_not_found",
        node_id=node.id,
        topic=tp[0],
        partition=tp[1],
        asked=ask,
        reply=str(reply)[:200],
    )
    raise PassBack(ErrorReply(ErrorCode.BUSY, f"{tp[0]}/{tp[1]} has no leader now: retry"))


def leader_of(
    node: ClusterMember, tp: TopicPartition, replica: ReplicaActor | None, turn: int = 0
) -> int | None:
    """Who to ask for `tp`: the leader as this node sees it, else one of the replicas the
    controller places (a `turn` each), which answers or names the leader."""
    if replica is not None and replica.view.leader_id is not None:
        return replica.view.leader_id
    controller = node.controller_actor
    hint = controller.leader_hint(*tp)
    if hint is not None:
        return hint
    topic = controller.state.topics.get(tp[0])
    if topic is None or tp[1] >= len(topic.partitions):
        return None
    others = [n for n in topic.partitions[tp[1]].replicas if n != node.id]
    return others[turn % len(others)] if others else None


async def ask_node(node: ClusterMember, node_id: int | None, message: Message) -> Message | None:
    """`message` answered by another node; None if there is none to ask or it is gone."""
    if node_id is None or node_id == node.id:
        return None
    try:
        return await node.request(node_id, message)
    except ConnectionClosed:
        return None
