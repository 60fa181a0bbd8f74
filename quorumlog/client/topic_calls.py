"""The topic calls of `AsyncClient`: create, list, describe, delete and change topics,
move partitions and rebalance the cluster. Each goes to the controller's leader (any node forwards it) and is sent
again with `retry` after a try whose outcome is unknown: the controller answers a change
already made as done."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from quorumlog.client.protocol import admin_retry, topic_request, topics_of
from quorumlog.transport.messages import AdminReply


class TopicCalls:
    """Mixed into `AsyncClient`, which provides `_call`, `_deadline`, `_partition_counts`
    and `timeout`."""

    _partition_counts: dict[str, int]
    timeout: float
    _call: Callable
    _deadline: Callable

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replicas: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        timestamps: str = "create",
        config: Mapping[str, object] | None = None,
    ) -> None:
        await self._topic_call(
            "create_topic",
            name=name,
            partitions=partitions,
            replicas=replicas,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
            timestamp_type=timestamps,
            **({} if config is None else {"config": dict(config)}),
        )
        self._partition_counts[name] = partitions

    async def topics(self, details: bool = False) -> dict[str, int] | dict[str, tuple[int, int]]:
        """Every topic with its partition count (details: and its replication factor)."""
        reply = await self._topic_call("list_topics")
        counts = topics_of(reply)
        self._partition_counts.update(counts)
        if details:
            return {name: tuple(row) for name, row in reply.result["topics"].items()}
        return counts

    async def describe_topic(self, name: str) -> list[dict]:
        return (await self._topic_call("describe_topic", name=name)).result["partitions"]

    async def delete_topic(self, name: str) -> None:
        await self._topic_call("delete_topic", name=name)
        self._partition_counts.pop(name, None)

    async def _topic_call(self, op: str, **args) -> AdminReply:
        request = topic_request(op, self.timeout, **args)
        with self._deadline():
            reply = await self._call(request, to_leader=True, bounded=False, as_retry=admin_retry)
        assert isinstance(reply, AdminReply)
        return reply

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        replicas: int | None = None,
        config: Mapping[str, object] | None = None,
        replace_config: bool = False,
    ) -> dict:
        """Change a topic: its settings by Kafka's names (`{"retention.ms": 86400000}`; a
        value None goes back to the node's setting; `replace_config`: every name not given
        does), then grow it to `partitions` (never fewer), then give every partition
        `replicas` replicas. Returns once the change is committed (and new partitions have
        leaders): `{"topic", "partitions", "replicas", "moving"}`; replicas then move in
        the background (`partition_moves`)."""
        args: dict[str, object] = {"name": name}
        if config is not None:
            args.update(config=dict(config), replace=replace_config)
        if partitions is not None:
            args["partitions"] = partitions
        if replicas is not None:
            args["replicas"] = replicas
        result = (await self._topic_call("alter_topic", **args)).result
        self._partition_counts[name] = result["partitions"]
        return result

    async def move_partition(self, topic: str, partition: int, to: Iterable[int]) -> None:
        """Give a partition exactly the replicas `to` (the first is its preferred leader);
        returns once the new set is committed: the replicas then move (`partition_moves`)."""
        await self._topic_call("move_partition", topic=topic, partition=partition, to=list(to))

    async def partition_moves(self) -> list[dict]:
        """The partitions whose replicas are still moving: `topic`, `partition`, `from`
        (the group's members now), `to`, `leader_id`, `bytes_total` (the leader's log),
        `bytes_copied` (per joining node) and `progress` (0-1, the slowest joiner)."""
        return (await self._topic_call("partition_moves")).result["moves"]

    async def trim_topic(self, name: str, partition: int, before: int) -> int:
        """Readers of the partition start at `before` from now on (-1: its committed end;
        Kafka's DeleteRecords); the records before it go. Returns the log start after."""
        args = {"topic": name, "partition": partition, "before": before}
        return (await self._topic_call("trim_partition", **args)).result["log_start_offset"]

    async def rebalance(self, start: bool = True) -> dict:
        """Spread replicas, then preferred leaders, evenly over every node (the controller
        moves at most `rebalance_moves_max` replicas at a time). Starts a rebalance unless
        the cluster is balanced or one is under way (`start=False`: only asks), and returns
        where it stands: `state` (idle, moving, balanced), `moves_done`, `moves_left`,
        `moves_in_flight`, `waiting` (why it moves nothing now, or None), each node's
        `replicas` and `leaders`, and with `start`, the `plan` from here
        (`[{"topic", "partition", "from", "to"}, ...]`)."""
        return (await self._topic_call("rebalance", start=start)).result
