"""Metadata and topic calls of the Kafka listener: which brokers there are (with their Kafka
addresses), which topics, who leads each partition; CreateTopics and DeleteTopics run on
the controller's leader as the native topic calls do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
import trio
from kio.schema.errors import ErrorCode as K

from quorumlog.actors.admin import forward_to_leader
from quorumlog.consumers.state import GROUPS_TOPIC
from quorumlog.controller.topic_config import ConfigError, changed_settings, kafka_settings
from quorumlog.log.config import TopicSettings
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import (
    AdminReply,
    AdminRequest,
    ErrorCode,
    ErrorReply,
    Message,
    StatusReply,
    StatusRequest,
)

if TYPE_CHECKING:
    from quorumlog.actors.node import Node

logger = structlog.get_logger("quorumlog.kafka")

REFRESH_S = 2.0  # how often the other brokers' Kafka addresses are asked for
ASK_S = 1.0
RETRY_S = 0.2
AUTO_CREATE_S = 5.0  # a client asks again if its topic has no leader yet
CLUSTER_ID = "quorumlog"

# quorumlog's answers, as Kafka's error codes (anything else: UNKNOWN_SERVER_ERROR).
ERRORS = {
    ErrorCode.NOT_LEADER: K.not_leader_or_follower,
    ErrorCode.STEPPING_DOWN: K.not_leader_or_follower,
    ErrorCode.BUSY: K.not_leader_or_follower,
    ErrorCode.OFFSET_OUT_OF_RANGE: K.offset_out_of_range,
    ErrorCode.TIMEOUT: K.request_timed_out,
    ErrorCode.UNKNOWN: K.request_timed_out,
    ErrorCode.TOO_LARGE: K.message_too_large,
    ErrorCode.UNKNOWN_TOPIC: K.unknown_topic_or_partition,
    ErrorCode.PROTOCOL: K.corrupt_message,
    ErrorCode.REFUSED: K.invalid_request,
}


def kafka_error(reply: ErrorReply) -> K:
    return ERRORS.get(reply.code, K.unknown_server_error)


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class KafkaBrokers:
    """Every broker's Kafka address: this node's own, the others' as their status says,
    asked in the background every REFRESH_S (a node's address is fixed while it runs)."""

    def __init__(self, node: Node, own_address: str):
        self.node = node
        self.addresses: dict[int, str] = {node.id: own_address}
        self.asked = trio.Event()  # set after the first round of asking

    async def run(self) -> None:
        while True:
            brokers = self.node.controller_actor.state.brokers
            async with trio.open_nursery() as nursery:
                for broker in brokers:
                    if broker != self.node.id:
                        nursery.start_soon(self._ask, broker)
            if brokers and all(b in self.addresses for b in brokers):
                self.asked.set()
                await trio.sleep(REFRESH_S)
            else:  # a node still starting: ask again soon
                await trio.sleep(RETRY_S)

    async def _ask(self, broker: int) -> None:
        with trio.move_on_after(ASK_S):
            try:
                reply = await self.node.request(broker, StatusRequest())
            except ConnectionClosed:
                return
            if isinstance(reply, StatusReply) and reply.status.get("kafka_address"):
                self.addresses[broker] = reply.status["kafka_address"]

    async def known(self) -> dict[int, str]:
        """The brokers whose Kafka address is known: once every broker's is, or ASK_S
        after the first call (a client that sees too few brokers may never ask again)."""
        with trio.move_on_after(ASK_S):
            await self.asked.wait()
        brokers = self.node.controller_actor.state.brokers
        return {b: a for b, a in self.addresses.items() if b in brokers}


class Cluster:
    def __init__(
        self, node: Node, brokers: KafkaBrokers, auto_create: tuple[int, int] | None = None
    ):
        self.node = node
        self.brokers = brokers
        self.auto_create = auto_create

    async def metadata(self, request, version: int) -> dict:
        known = await self.brokers.known()
        state = self.node.controller_actor.state
        if request.topics is None or (version == 0 and not request.topics):
            names = sorted(state.topics)
        else:
            names = [t.name for t in request.topics]
            # v4 on ask for it (Kafka's producers do, consumers do not); before, it was implied.
            if self.auto_create is not None and getattr(request, "allow_auto_topic_creation", True):
                await self._create_missing([n for n in names if n not in state.topics])
        topics = []
        for name in names:
            topic = state.topics.get(name)
            if topic is None:
                topics.append({"name": name, "error_code": K.unknown_topic_or_partition})
                continue
            topics.append(
                {
                    "name": name,
                    "is_internal": name == GROUPS_TOPIC,
                    "partitions": [
                        self._partition(
                            name, p.partition, p.replicas or tuple(state.brokers), known
                        )
                        for p in topic.partitions
                    ],
                }
            )
        controller = self.node.controller.view.leader_id
        return {
            "brokers": [
                {"node_id": b, "host": host_port(a)[0], "port": host_port(a)[1]}
                for b, a in sorted(known.items())
            ],
            "cluster_id": CLUSTER_ID,
            "controller_id": controller if controller in known else -1,
            "topics": topics,
        }

    async def _create_missing(self, names: list[str]) -> None:
        """Each of `names` created as the node's auto_create says (a bad name, or one of
        the cluster's own, stays unknown); answered once it has leaders, or AUTO_CREATE_S."""
        assert self.auto_create is not None
        partitions, replicas = self.auto_create
        brokers = len(self.node.controller_actor.state.brokers)
        with trio.move_on_after(AUTO_CREATE_S):
            for name in names:
                if name.startswith("__"):
                    continue
                args = {
                    "name": name,
                    "partitions": partitions,
                    "replicas": max(1, min(replicas, brokers)),
                    "retry": True,  # a racing create of the same topic is no error
                    "timeout_s": AUTO_CREATE_S,
                }
                reply = await forward_to_leader(
                    self.node, self.node.controller, AdminRequest("create_topic", args)
                )
                created = isinstance(reply, AdminReply)
                logger.info(
                    "kafka_topic_auto_create", topic=name, created=created, reply=str(reply)
                )

    def _partition(
        self, topic: str, partition: int, replicas: tuple[int, ...], known: dict[int, str]
    ) -> dict:
        leader = self.node.controller_actor.leader_hint(topic, partition)
        if leader not in known:
            leader = -1
        return {
            "error_code": K.none if leader >= 0 else K.leader_not_available,
            "partition_index": partition,
            "leader_id": leader,
            "replica_nodes": list(replicas),
            "isr_nodes": list(replicas),
        }

    async def create_topics(self, request, version: int) -> dict:
        timeout_s = max(request.timeout.total_seconds(), 1.0)
        results = []
        for topic in request.topics:
            if topic.name in self.node.controller_actor.state.topics:
                # As Kafka: an existing topic is named so before its configs are looked at.
                results.append(_exists(topic.name))
                continue
            args = {"name": topic.name, "timeout_s": timeout_s}
            if topic.num_partitions > 0:
                args["partitions"] = topic.num_partitions
            if topic.replication_factor > 0:
                args["replicas"] = topic.replication_factor
            if topic.configs:  # by Kafka's names, as the native call takes them
                try:
                    args["config"] = kafka_settings({c.name: c.value for c in topic.configs})
                    changed_settings(TopicSettings(), args["config"])
                except ConfigError as exc:
                    results.append(
                        {
                            "name": topic.name,
                            "error_code": K.invalid_config,
                            "error_message": str(exc),
                        }
                    )
                    continue
            if request.validate_only:
                results.append({"name": topic.name, "error_code": K.none})
                continue
            error, message = await self._topic_call("create_topic", args)
            results.append(
                _exists(topic.name)  # made meanwhile, or not yet known here
                if error is K.topic_already_exists
                else {"name": topic.name, "error_code": error, "error_message": message}
            )
        return {"topics": results}

    async def delete_topics(self, request, version: int) -> dict:
        timeout_s = max(request.timeout.total_seconds(), 1.0)
        results = []
        for name in request.topic_names:
            args = {"name": name, "timeout_s": timeout_s}
            error, _ = await self._topic_call("delete_topic", args)
            results.append({"name": name, "error_code": error})
        return {"responses": results}

    async def _topic_call(self, op: str, args: dict) -> tuple[K, str | None]:
        name = args["name"]
        reply = await ask_controller(self.node, op, args, args["timeout_s"])
        if reply is None:
            return K.request_timed_out, f"{op} of {name!r} did not finish in time"
        if isinstance(reply, AdminReply):
            return K.none, None
        return _topic_error(op, reply), reply.message


def _exists(name: str) -> dict:
    return {
        "name": name,
        "error_code": K.topic_already_exists,
        "error_message": f"Topic '{name}' already exists.",  # Kafka's words
    }


async def ask_controller(node: Node, op: str, args: dict, timeout_s: float) -> Message | None:
    """`op` answered by the controller's leader (forwarded there), or None after
    `timeout_s`."""
    with trio.move_on_after(timeout_s):
        request = AdminRequest(op, {**args, "timeout_s": timeout_s})
        return await forward_to_leader(node, node.controller, request)
    return None


def _topic_error(op: str, reply: ErrorReply) -> K:
    message = reply.message
    if reply.code is ErrorCode.UNKNOWN_TOPIC:
        return K.unknown_topic_or_partition
    if "exists" in message:
        return K.topic_already_exists
    if "replica" in message:
        return K.invalid_replication_factor
    if "partition" in message:
        return K.invalid_partitions
    if "name" in message:
        return K.invalid_topic_exception
    return K.invalid_request if op == "create_topic" else kafka_error(reply)
