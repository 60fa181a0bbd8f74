"""The Kafka admin calls an operator's tools make: topic and broker configuration, more
partitions, partition reassignments, and deleting consumer groups. Each is the native call
of the same name (actors/cluster/topic_changes.py, actors/coordinator/group_calls.py), so a change made
through Kafka is the one `quorumlog topic describe` shows, and the other way round."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode as K

from quorumlog.actors.kafka import topic_configs
from quorumlog.actors.kafka.cluster import ask_controller, kafka_error
from quorumlog.actors.kafka.groups import KafkaGroups
from quorumlog.controller.topic_config import (
    ConfigError,
    changed_settings,
    described,
    kafka_settings,
)
from quorumlog.log.config import TopicSettings
from quorumlog.log.kafka_batch import DECOMPRESSED_BYTES_MAX
from quorumlog.transport.messages import (
    AdminReply,
    ErrorCode,
    ErrorReply,
    GroupRequest,
)

if TYPE_CHECKING:
    from quorumlog.actors.kafka.host import KafkaHost

TOPIC, BROKER = 2, 4  # Kafka's resource types
STATIC_BROKER_CONFIG = 4  # a config source
SET, DELETE = 0, 1  # IncrementalAlterConfigs' operations
CALL_S_DEFAULT = 30.0


class KafkaAdmin:
    def __init__(self, node: KafkaHost, groups: KafkaGroups):
        self.node = node
        self.groups = groups

    # ------------------------------------------------------------------- configuration

    async def describe_configs(self, request, version: int) -> dict:
        names = [r.resource_name for r in request.resources if r.resource_type == TOPIC]
        topics: dict = {}
        error = K.none
        if names:  # from the controller's leader: the latest change is applied there
            error, reply = await self._call("topic_configs", {"names": names}, None)
            topics = reply.result["topics"] if isinstance(reply, AdminReply) else {}
        results = []
        for resource in request.resources:
            out = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
            if resource.resource_type == TOPIC:
                if not isinstance(topics.get(resource.resource_name), dict):
                    missing = K.unknown_topic_or_partition if error is K.none else error
                    results.append({**out, "error_code": missing})
                    continue
                configs = self._topic_configs(topics[resource.resource_name], request)
            elif resource.resource_type == BROKER and resource.resource_name not in (
                "",
                str(self.node.id),
            ):
                results.append({**out, "error_code": K.invalid_request})  # ask that broker
                continue
            elif resource.resource_type == BROKER:
                configs = self._broker_configs()
            else:
                results.append({**out, "error_code": K.invalid_request})
                continue
            keys = resource.configuration_keys
            if keys:  # as Kafka: none, or none named, is all of them
                configs = [c for c in configs if c["name"] in keys]
            results.append({**out, "error_code": K.none, "configs": configs})
        return {"results": results}

    def _broker_configs(self) -> list[dict]:
        """This node's settings under Kafka's broker names, read-only: a node's settings
        are its config file's."""
        settings = described(
            TopicSettings(), self.node.storage.log_config, self.node.settings.append_bytes_max
        )
        configs = [_broker_config("broker.id", self.node.id, topic_configs.INT)]
        for name, value in settings.items():
            known = topic_configs.BY_NAME[name]
            assert known.synonym is not None
            configs.append(_broker_config(known.synonym, value, known.config_type))
        return configs

    def _topic_configs(self, found: dict, request) -> list[dict]:
        """Every Kafka topic config of a topic the controller's leader described."""
        fixed = {
            "min.insync.replicas": str(found["replication_factor"] // 2 + 1),
            "index.interval.bytes": str(self.node.storage.log_config.index_interval_bytes),
            "max.decompressed.message.bytes": str(DECOMPRESSED_BYTES_MAX),
        }
        return topic_configs.described(
            found["config"],
            set(found["set"]),
            found["node"],
            fixed,
            synonyms=request.include_synonyms,
            documentation=getattr(request, "include_documentation", False),
        )

    async def alter_configs(self, request, version: int) -> dict:
        """AlterConfigs: every topic setting not given goes back to the node's."""
        return await self._alter(request, replace_all=True)

    async def incremental_alter_configs(self, request, version: int) -> dict:
        return await self._alter(request, replace_all=False)

    async def _alter(self, request, replace_all: bool) -> dict:
        responses = []
        for resource in request.resources:
            out = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
            error, message = await self._alter_one(resource, replace_all, request.validate_only)
            responses.append({**out, "error_code": error, "error_message": message})
        return {"responses": responses}

    async def _alter_one(self, resource, replace_all: bool, validate_only: bool):
        if resource.resource_type != TOPIC:
            return (
                K.invalid_request,
                "only topics' settings change here (a node's are its config file's)",
            )
        changes: dict[str, object] = {}
        for c in resource.configs:
            operation = getattr(c, "config_operation", SET)
            if operation not in (SET, DELETE):
                return (
                    K.invalid_request,
                    f"{c.name}: only SET and DELETE apply to a topic's settings",
                )
            changes[c.name] = None if operation == DELETE else c.value
        name = resource.resource_name
        topic = self.node.controller_actor.state.topics.get(name)
        if topic is None:
            return K.unknown_topic_or_partition, f"unknown topic {name!r}"
        try:
            changes = kafka_settings(changes)
            changed_settings(topic.settings, changes, replace_all)
        except ConfigError as exc:
            return K.invalid_config, str(exc)
        if validate_only:
            return K.none, None
        args = {"name": name, "config": changes, "replace": replace_all}
        return await self._topic_call("alter_topic", args)

    # ------------------------------------------------------------------- partitions

    async def create_partitions(self, request, version: int) -> dict:
        results = []
        for topic in request.topics:
            error, message = self._check_grow(topic.name, topic.count)
            if topic.assignments is not None:
                error, message = (
                    K.invalid_replica_assignment,
                    "the controller places new partitions",
                )
            elif error is K.none and not request.validate_only:
                args = {"name": topic.name, "partitions": topic.count}
                error, message = await self._topic_call("alter_topic", args, request.timeout)
            results.append({"name": topic.name, "error_code": error, "error_message": message})
        return {"results": results}

    def _check_grow(self, name: str, count: int) -> tuple[K, str | None]:
        """Kafka's checks: a topic it knows, and more partitions than it has (a count it
        has already is an error there, where the native call takes it as done)."""
        topic = self.node.controller_actor.state.topics.get(name)
        if topic is None:
            return K.unknown_topic_or_partition, f"unknown topic {name!r}"
        if count <= len(topic.partitions):
            return K.invalid_partitions, f"topic {name!r} has {len(topic.partitions)} partitions"
        return K.none, None

    async def alter_partition_reassignments(self, request, version: int) -> dict:
        responses = []
        moving = None
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                if p.replicas is None:  # a cancel: the move goes on, as Raft's change must
                    moving = moving if moving is not None else await self._moves(request.timeout)
                    under_way = any(
                        m["topic"] == topic.name and m["partition"] == p.partition_index
                        for m in moving
                    )
                    error = K.invalid_request if under_way else K.no_reassignment_in_progress
                    message = "a move under way cannot be cancelled" if under_way else None
                else:
                    args = {
                        "topic": topic.name,
                        "partition": p.partition_index,
                        "to": list(p.replicas),
                    }
                    error, message = await self._topic_call("move_partition", args, request.timeout)
                partitions.append(
                    {
                        "partition_index": p.partition_index,
                        "error_code": error,
                        "error_message": message,
                    }
                )
            responses.append({"name": topic.name, "partitions": partitions})
        return {"error_code": K.none, "responses": responses}

    async def list_partition_reassignments(self, request, version: int) -> dict:
        wanted = (
            None
            if request.topics is None
            else {(t.name, p) for t in request.topics for p in t.partition_indexes}
        )
        by_topic: dict[str, list[dict]] = {}
        for m in await self._moves(request.timeout):
            if wanted is not None and (m["topic"], m["partition"]) not in wanted:
                continue
            adding = [n for n in m["to"] if n not in m["from"]]
            removing = [n for n in m["from"] if n not in m["to"]]
            by_topic.setdefault(m["topic"], []).append(
                {
                    "partition_index": m["partition"],
                    "replicas": [*m["to"], *removing],
                    "adding_replicas": adding,
                    "removing_replicas": removing,
                }
            )
        topics = [{"name": n, "partitions": ps} for n, ps in sorted(by_topic.items())]
        return {"error_code": K.none, "topics": topics}

    async def _moves(self, timeout) -> list[dict]:
        _, reply = await self._call("partition_moves", {}, timeout)
        return reply.result["moves"] if isinstance(reply, AdminReply) else []

    async def delete_records(self, request, version: int) -> dict:
        """Each partition's log start moved to the offset given (-1: its high watermark)."""
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                args = {"topic": topic.name, "partition": p.partition_index, "before": p.offset}
                error, reply = await self._call("trim_partition", args, request.timeout)
                answer = {"partition_index": p.partition_index, "error_code": error}
                if isinstance(reply, AdminReply):
                    answer["low_watermark"] = reply.result["log_start_offset"]
                elif isinstance(reply, ErrorReply) and "cannot be trimmed" in reply.message:
                    answer["error_code"] = K.offset_out_of_range
                partitions.append({"low_watermark": -1, **answer})
            topics.append({"name": topic.name, "partitions": partitions})
        return {"topics": topics}

    # ------------------------------------------------------------------- groups

    async def delete_groups(self, request, version: int) -> dict:
        results = []
        for name in request.groups_names:
            results.append({"group_id": name, "error_code": await self._delete_group(name)})
        return {"results": results}

    async def _delete_group(self, name: str) -> K:
        """The native `group delete` (refused while native or Kafka members are active)."""
        reply = await self.node.coordinator.handle(GroupRequest("delete", name, {}))
        if isinstance(reply, AdminReply):
            self.groups.groups.pop(name, None)
            return K.none
        message = getattr(reply, "message", "")
        if "unknown group" in message:
            return K.group_id_not_found
        if "active" in message:
            return K.non_empty_group
        if "a group name" in message:
            return K.invalid_group_id
        return K.not_coordinator

    # ------------------------------------------------------------------- calls

    async def _topic_call(self, op: str, args: dict, timeout=None) -> tuple[K, str | None]:
        error, reply = await self._call(op, args, timeout)
        return error, None if isinstance(reply, AdminReply) else getattr(reply, "message", None)

    async def _call(self, op: str, args: dict, timeout) -> tuple[K, AdminReply | ErrorReply | None]:
        """`op` on the controller's leader, within the request's timeout."""
        timeout_s = timeout.total_seconds() if timeout is not None else 0.0
        timeout_s = timeout_s if timeout_s > 0 else CALL_S_DEFAULT
        reply = await ask_controller(self.node, op, args, timeout_s)
        if reply is None:
            return K.request_timed_out, None
        if isinstance(reply, AdminReply):
            return K.none, reply
        return _error_of(reply), reply


def _error_of(reply: ErrorReply) -> K:
    message = reply.message
    if message.startswith("unknown topic") or "has no partition" in message:
        return K.unknown_topic_or_partition
    if "never shrinks" in message or "partitions" in message:
        return K.invalid_partitions
    if "replica" in message or "no node" in message:
        return K.invalid_replica_assignment
    if reply.code is ErrorCode.REFUSED:
        return K.invalid_request
    return kafka_error(reply)


def _broker_config(name: str, value: object, config_type: int) -> dict:
    return {
        "name": name,
        "value": str(value),
        "read_only": True,
        "config_source": STATIC_BROKER_CONFIG,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": config_type,
    }
