"""How a node answers a call for a partition it serves no replica of: the leader it
believes in, or the controller's leader to ask, or that there is no such partition."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from quorumlog.transport.messages import ErrorCode, ErrorReply, PartitionCall

if TYPE_CHECKING:
    from quorumlog.actors.cluster.member import ClusterMember

logger = structlog.get_logger("quorumlog.node")


def no_replica(node: ClusterMember, message: PartitionCall) -> ErrorReply:
    """A call for a partition this node holds no (current) replica of: the leader it believes in,
    or, for a partition it does not know, the controller's leader to ask (or, from that
    leader, the answer: no such partition)."""
    if not node.is_member():
        return node.not_a_member()
    topic, partition = message.topic, message.partition
    found = node.controller_actor.state.topics.get(topic)
    if found is not None and 0 <= partition < len(found.partitions):
        leader = node.controller_actor.leader_hint(topic, partition)
        return ErrorReply(
            ErrorCode.NOT_LEADER,
            f"node {node.id} holds no replica of {topic}/{partition}",
            leader,
            node.address_of(leader),
        )
    what = f"topic {topic!r}" if found is None else f"partition {partition} of topic {topic!r}"
    if node.controller_actor.is_current():
        logger.info("unknown_topic", node_id=node.id, topic=topic, partition=partition)
        return ErrorReply(ErrorCode.UNKNOWN_TOPIC, f"unknown {what}")
    # This node's state may lag (it just restarted): only the controller's leader knows.
    ask = node.controller.view.leader_id
    if ask is None or ask == node.id:
        return ErrorReply(ErrorCode.NOT_LEADER, f"node {node.id} cannot tell of {what} yet")
    return ErrorReply(ErrorCode.UNKNOWN_TOPIC, f"unknown {what}", ask, node.address_of(ask))
