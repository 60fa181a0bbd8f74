"""A node's partition replicas come and go as the controller's state says: made when
placed here, given their topic's settings and log start as they change, deleted with their
topic, buried (a tombstone) once moved off and no longer counted by their group. One such
change at a time: a burial that stopped a replica raced the controller placing it here
again, and deleted the new replica's files under it (simulation seed 10000)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import structlog
import trio

from quorumlog.controller.state import DEFAULT_TOPIC, Partition
from quorumlog.log.config import TopicSettings
from quorumlog.membership.config import Configuration

if TYPE_CHECKING:
    from quorumlog.actors.node.node import Node

logger = structlog.get_logger("quorumlog.node")


class NodeReplicas:
    """Mixed into `Node`."""

    _replicas_changing: trio.Lock

    async def add_partition(
        self: Node,
        placed: Partition,
        config: Configuration | None,
        settings: TopicSettings,
    ) -> None:
        """Start a replica of a partition the controller placed here."""
        async with self._replicas_changing:
            await self._add_partition(placed, config, settings)

    async def _add_partition(
        self: Node, placed: Partition, config: Configuration | None, settings: TopicSettings
    ) -> None:
        assert self._manager is not None
        key = (placed.topic, placed.partition)
        if key in self.partitions:
            return  # placed here again while it was being buried: made after, not during
        storage = await self._run_sync(
            lambda: self.storage.create_partition(
                *key,
                placed.group_id,
                config=config,
                settings=settings,
                rng=random.Random(self._rng.getrandbits(64)),
            )
        )
        self.storage.add(*key, storage)
        group = self._group(storage)
        if config is not None and placed.replicas[0] == self.id:
            group.campaign_soon()
        self.partitions[key] = group
        self.groups[group.group_id] = group
        self._keys[group.group_id] = key
        await self._manager.start(group)
        logger.info(
            "replica_created", node_id=self.id, topic=key[0], partition=key[1], group=group.group_id
        )

    async def configure_partition(
        self: Node, key: tuple[str, int], settings: TopicSettings, log_start: int
    ) -> None:
        """Give a replica its topic's settings and its partition's log start, where they
        changed (through the controller's log). Settings are recorded with the replica
        first, so a restart opens it with them. Called for every replica at every
        controller change: what has not changed costs no lock and no scheduler pass."""
        group = self.partitions.get(key)
        if group is None or (
            group.log.config == self.storage.log_config_of(key[0], settings)
            and log_start <= group.storage.log_floor
        ):
            return
        async with self._replicas_changing:
            if key in self.partitions:
                await self._configure_partition(key, settings, log_start)

    async def _configure_partition(
        self: Node, key: tuple[str, int], settings: TopicSettings, log_start: int
    ) -> None:
        config = self.storage.log_config_of(key[0], settings)
        group = self.partitions[key]
        log_floor = max(log_start, group.log_floor)
        if group.log.config != config or log_floor != group.storage.log_floor:
            # Kept before it holds: a crash then would let a restart serve again what a
            # trim deleted, until the controller's log told it once more.
            await self._run_sync(self.storage.keep_settings, *key, settings, log_floor)
        if group.log.config != config:
            group.reconfigure(config)
            logger.info("replica_configured", node_id=self.id, topic=key[0], partition=key[1])
        if log_start > group.log_floor:
            group.trim(log_start)

    async def remove_partition(self: Node, key: tuple[str, int]) -> None:
        """Stop a replica and delete its files (its topic was deleted)."""
        async with self._replicas_changing:
            group_id = await self._stop_replica(key)
            await self._run_sync(self.storage.remove_partition, self.storage.pop(*key))
        logger.info(
            "replica_removed", node_id=self.id, topic=key[0], partition=key[1], group=group_id
        )

    def moved_off(self: Node, key: tuple[str, int]) -> bool:
        """Whether this node's replica of a partition is one the controller now places
        elsewhere (a partition of `default` follows membership instead)."""
        group = self.partitions.get(key)
        topic = self.controller_actor.state.topics.get(key[0])
        if group is None or key[0] == DEFAULT_TOPIC or topic is None:
            return False
        if not 0 <= key[1] < len(topic.partitions):
            return False
        placed = topic.partitions[key[1]]
        return placed.group_id == group.group_id and self.id not in placed.replicas

    async def bury_partition(self: Node, key: tuple[str, int]) -> None:
        """Stop a replica that moved off this node, which its group no longer counts, and
        delete its log, keeping its term and vote (actors/node/tombstones.py). Checked again
        once it holds the lock: a move that placed it here again while its group's leader
        was asked would lose the new replica, which nothing would make again (seed 80100:
        the learner the move added never caught up). A node removed from the cluster is
        placed nowhere (actors/node/burial.py)."""
        async with self._replicas_changing:
            if key not in self.partitions or (self.is_member() and not self.moved_off(key)):
                return
            group_id = await self._stop_replica(key)
            await self._run_sync(self.storage.bury, *key, self.storage.pop(*key))
        logger.info(
            "replica_tombstoned", node_id=self.id, topic=key[0], partition=key[1], group=group_id
        )

    async def remove_tombstone(self: Node, key: tuple[str, int]) -> None:
        """What is left of a replica moved off this node: its topic was deleted."""
        await self._run_sync(self.storage.remove_tombstone, *key)

    async def _stop_replica(self: Node, key: tuple[str, int]) -> int:
        assert self._manager is not None
        group = self.partitions.pop(key)
        del self.groups[group.group_id], self._keys[group.group_id]
        await self._manager.stop(group.group_id)
        await self.flusher.forget(group.group_id)
        self.heartbeats.forget(group.group_id)
        self.campaign_slots.forget(group.group_id)
        self._addresses_of.pop(group.group_id, None)
        self._update_peers()
        return group.group_id
