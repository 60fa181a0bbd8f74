"""Which module answers each Kafka API (see `transport/kafka.py` for the versions served)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from quorumlog.actors.kafka import acls
from quorumlog.actors.kafka.admin import KafkaAdmin
from quorumlog.actors.kafka.cluster import Cluster, KafkaBrokers
from quorumlog.actors.kafka.consumer_groups import ConsumerGroups
from quorumlog.actors.kafka.fetch import Fetch
from quorumlog.actors.kafka.groups import KafkaGroups
from quorumlog.actors.kafka.produce import Produce, ProduceAnswer
from quorumlog.actors.kafka.sasl import AUTHENTICATE, HANDSHAKE, SaslSession
from quorumlog.actors.kafka.transactions import KafkaTransactions
from quorumlog.transport import kafka
from quorumlog.transport.kafka import Request

if TYPE_CHECKING:
    from quorumlog.actors.kafka.host import KafkaHost

PRODUCE = 0
CONSUMER_GROUP_HEARTBEAT = 68  # its handler is given the client's id and host
SASL = {HANDSHAKE: lambda s: s.handshake, AUTHENTICATE: lambda s: s.authenticate}

Answer = Callable[[], Awaitable[dict | None]]


class KafkaApi:
    def __init__(
        self,
        node: KafkaHost,
        brokers: KafkaBrokers,
        rng: random.Random,
        auto_create: tuple[int, int] | None = None,
    ):
        cluster = Cluster(node, brokers, auto_create)
        fetch = Fetch(node)
        transactions = KafkaTransactions(node, brokers)
        self.produce = Produce(node, rng, transactions)
        self.groups = KafkaGroups(node, brokers, rng, transactions)
        groups = self.groups
        self.consumer_groups = ConsumerGroups(node, groups)
        consumers = self.consumer_groups
        node.kafka_members = lambda name: groups.members_of(name) + consumers.members_of(name)
        admin = KafkaAdmin(node, groups)
        self.transactions = transactions
        self.handlers = {
            1: fetch.fetch,
            2: fetch.list_offsets,
            3: cluster.metadata,
            8: groups.offset_commit,
            9: groups.offset_fetch,
            10: groups.find_coordinator,
            11: groups.join_group,
            12: groups.heartbeat,
            13: groups.leave_group,
            14: groups.sync_group,
            15: groups.describe_groups,
            16: groups.list_groups,
            18: self.api_versions,
            19: cluster.create_topics,
            20: cluster.delete_topics,
            21: admin.delete_records,
            22: self.init_producer_id,
            23: fetch.offset_for_leader_epoch,
            24: transactions.add_partitions_to_txn,
            25: transactions.add_offsets_to_txn,
            26: transactions.end_txn,
            28: groups.txn_offset_commit,
            29: acls.describe_acls,
            30: acls.create_acls,
            31: acls.delete_acls,
            32: admin.describe_configs,
            33: admin.alter_configs,
            37: admin.create_partitions,
            42: admin.delete_groups,
            44: admin.incremental_alter_configs,
            45: admin.alter_partition_reassignments,
            46: admin.list_partition_reassignments,
            47: groups.offset_delete,
            60: cluster.describe_cluster,
            CONSUMER_GROUP_HEARTBEAT: consumers.heartbeat,
            69: consumers.describe,
        }
        assert set(self.handlers) | {PRODUCE, *SASL} == set(kafka.SUPPORTED)

    async def submit(
        self, request: Request, sasl: SaslSession, host: str = ""
    ) -> Answer | ProduceAnswer:
        """What answers `request` on a connection: a Produce's appends are queued before
        this returns (requests on one connection append in the order they came), and
        complete its answer as they are answered; any other request's answer is run."""
        if request.api_key == PRODUCE:
            return await self.produce.submit(request.body, request.version)
        handler = (
            SASL[request.api_key](sasl)
            if request.api_key in SASL
            else (self.handlers[request.api_key])
        )

        async def answer() -> dict:
            if request.api_key == CONSUMER_GROUP_HEARTBEAT:
                client = (request.client_id or "", host)
                return await handler(request.body, request.version, client)
            return await handler(request.body, request.version)

        return answer

    async def init_producer_id(self, request, version: int) -> dict:
        """An idempotent producer's id, or a transactional producer's session."""
        if request.transactional_id is None:
            return await self.produce.init_producer_id(request, version)
        return await self.transactions.init_producer_id(request, version)

    async def api_versions(self, request, version: int) -> dict:
        return kafka.api_versions()
