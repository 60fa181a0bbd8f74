"""Metadata and topic calls of the Kafka listener: which brokers there are (with their Kafka
addresses), which topics, who leads each partition; CreateTopics and DeleteTopics run on
the controller's leader as the native topic calls do."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import structlog
import trio
from kio.schema.errors import ErrorCode as K

from quorumlog.actors.cluster.admin_calls import forward_to_leader
from quorumlog.actors.kafka import acls
from quorumlog.actors.services.storage import INTERNAL_TOPICS
from quorumlog.controller.kafka_ids import kafka_cluster_id
from quorumlog.controller.state import Topic
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
    from quorumlog.actors.cluster.member import ClusterMember

logger = structlog.get_logger("quorumlog.kafka")

REFRESH_S = 2.0  # how often the other brokers' Kafka addresses are asked for
ASK_S = 1.0
RETRY_S = 0.2
AUTO_CREATE_S = 5.0  # a client asks again if its topic has no leader yet
LOADING_S = 2.0  # how long a Metadata waits for a topic its controller state may still lack
BROKERS, CONTROLLERS = 1, 2  # DescribeCluster's endpoint types

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
    ErrorCode.INVALID_RECORD: K.invalid_record,
}


def kafka_error(reply: ErrorReply) -> K:
    return ERRORS.get(reply.code, K.unknown_server_error)


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class KafkaBrokers:
    """Every broker's Kafka address: this node's own, the others' as their status says,
    asked in the background every REFRESH_S (a node's address is fixed while it runs, and
    may change or go with a restart)."""

    def __init__(self, node: ClusterMember, own_address: str):
        self.node = node
        # None: the broker answered that it serves no Kafka clients. It is never advertised:
        # a client would connect to whatever address it had before (issue 44).
        self.addresses: dict[int, str | None] = {node.id: own_address}
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
            if isinstance(reply, StatusReply):
                self.addresses[broker] = reply.status.get("kafka_address")

    async def known(self) -> dict[int, str]:
        """The brokers whose Kafka address is known: once every broker's is, or ASK_S
        after the first call (a client that sees too few brokers may never ask again)."""
        with trio.move_on_after(ASK_S):
            await self.asked.wait()
        brokers = self.node.controller_actor.state.brokers
        return {b: a for b, a in self.addresses.items() if b in brokers and a is not None}


class Cluster:
    def __init__(
        self, node: ClusterMember, brokers: KafkaBrokers, auto_create: tuple[int, int] | None = None
    ):
        self.node = node
        self.brokers = brokers
        self.auto_create = auto_create

    async def metadata(self, request, version: int) -> dict:
        known = await self.brokers.known()
        if not self.node.is_member():
            # A removed node's state stands still (issue 50): it names the members it
            # last learned of, not itself, and no leaders, so clients ask those members.
            members = self.node.removal.members()
            known = {b: a for b, a in known.items() if b in members and b != self.node.id}
        state = self.node.controller_actor.state
        if request.topics is None or (version == 0 and not request.topics):
            asked = [(name, None) for name in sorted(state.topics)]
        else:
            asked = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]
            names = [name for name, _ in asked if name is not None]
            # v4 on ask for it (Kafka's producers do, consumers do not); before, it was implied.
            if self.auto_create is not None and getattr(request, "allow_auto_topic_creation", True):
                await self._create_missing([n for n in names if n not in state.topics])
        operations = getattr(request, "include_topic_authorized_operations", False)
        topics = [
            await self._topic(name, topic_id, version, known, operations)
            for name, topic_id in asked
        ]
        answer = {
            "brokers": [
                {"node_id": b, "host": host_port(a)[0], "port": host_port(a)[1]}
                for b, a in sorted(known.items())
            ],
            "cluster_id": self.kafka_cluster_id(),
            "controller_id": self._controller(known),
            "topics": topics,
        }
        if getattr(request, "include_cluster_authorized_operations", False):
            answer["cluster_authorized_operations"] = acls.CLUSTER_OPERATIONS
        return answer

    def kafka_cluster_id(self) -> str | None:
        """The cluster's id as Kafka writes one; None until the cluster has named itself."""
        cluster_id = self.node.cluster.identity.cluster_id
        return None if cluster_id is None else kafka_cluster_id(cluster_id)

    def _controller(self, known: dict[int, str]) -> int:
        """The controller's leader if clients can reach it, else this broker, as Kafka names
        any broker when clients cannot reach the controller: librdkafka's admin client
        waits for ever on a Metadata that names none. Calls sent here are forwarded."""
        controller = self.node.controller.view.leader_id
        if controller in known:
            return controller
        return self.node.id if self.node.id in known else -1

    async def _topic(
        self,
        name: str | None,
        topic_id: uuid.UUID | None,
        version: int,
        known: dict[int, str],
        operations: bool,
    ) -> dict:
        """One topic of a Metadata answer, asked by name or (v12 on, name null) by id."""
        state = self.node.controller_actor.state
        out: dict = {"name": name}
        if operations:
            out["topic_authorized_operations"] = acls.TOPIC_OPERATIONS
        if name is None:
            if version < 12:  # as Kafka: ids were in the schema before they were served
                return {**out, "name": "", "topic_id": topic_id, "error_code": K.invalid_request}
            wanted = str(topic_id)
            topic = next((t for t in state.topics.values() if t.topic_id == wanted), None)
            if topic is None:
                return {**out, "topic_id": topic_id, "error_code": K.unknown_topic_id}
        else:
            topic = await self._named_topic(name)
            if isinstance(topic, K):
                return {**out, "error_code": topic}
        return {
            **out,
            "name": topic.name,
            "topic_id": uuid.UUID(topic.topic_id),
            "is_internal": topic.name in INTERNAL_TOPICS,
            "partitions": [
                self._partition(topic.name, p.partition, p.replicas or tuple(state.brokers), known)
                for p in topic.partitions
            ],
        }

    async def _named_topic(self, name: str) -> Topic | K:
        """The topic `name` as this node's state holds it, or the error to answer. A node
        that just restarted applies the controller's log only once it hears the commit
        offset, and must not call a topic unknown meanwhile (a client told
        UNKNOWN_TOPIC_OR_PARTITION may give up; librdkafka's admin does): a topic the
        cluster may have is waited for up to LOADING_S, then answered LEADER_NOT_AVAILABLE,
        which clients ask again about."""
        controller = self.node.controller_actor
        if name in controller.state.topics:
            return controller.state.topics[name]
        if await controller.topic_is_unknown(name):
            return K.unknown_topic_or_partition
        with trio.move_on_after(LOADING_S):
            while name not in controller.state.topics:
                await controller.changed.wait()
            return controller.state.topics[name]
        return K.leader_not_available

    async def describe_cluster(self, request, version: int) -> dict:
        """The brokers and controller as Metadata names them (a quorumlog node is both)."""
        endpoint = getattr(request, "endpoint_type", BROKERS)
        if endpoint != BROKERS:  # Kafka's answers, in its words
            error, message = (
                (
                    K.mismatched_endpoint_type,
                    "The request was sent to an endpoint of type BROKER, but we wanted an "
                    "endpoint of type CONTROLLER",
                )
                if endpoint == CONTROLLERS
                else (K.unsupported_endpoint_type, f"Unsupported endpoint type {endpoint}")
            )
            return {"error_code": error, "error_message": message, "cluster_id": ""}
        known = await self.brokers.known()
        answer = {
            "cluster_id": self.kafka_cluster_id() or "",
            "controller_id": self._controller(known),
            "brokers": [
                {"broker_id": b, "host": host_port(a)[0], "port": host_port(a)[1]}
                for b, a in sorted(known.items())
            ],
        }
        if request.include_cluster_authorized_operations:
            answer["cluster_authorized_operations"] = acls.CLUSTER_OPERATIONS
        return answer

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
        if not self.node.is_member():
            leader = -1  # its leader table is of an old configuration
        elif leader not in known or (leader != self.node.id and not self.node.peer_alive(leader)):
            # No leader, or one on a node this one has lost its link to (killed: nothing
            # told the table it is gone, issue 45): retriable, where a client that tried
            # the node would only time out.
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


async def ask_controller(
    node: ClusterMember, op: str, args: dict, timeout_s: float
) -> Message | None:
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
