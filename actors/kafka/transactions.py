"""Kafka's transactions: a transactional producer's calls, answered by the transaction
coordinator of its id (actors/coordinator/txn_coordinator.py), and the check a partition's
leader makes before it takes a transaction's batch.

FindCoordinator (key type 1) names the leader of the id's `__transactions` partition; the
calls asked of another node answer NOT_COORDINATOR, and the client finds it again.
InitProducerId with a transactional id starts a session (its producer id and next epoch);
AddPartitionsToTxn, AddOffsetsToTxn (the group's `__groups` partition joins the
transaction), EndTxn follow Kafka's protocol before transactions v2 (KIP-890 part 2 needs
the feature `transaction.version`, which ApiVersions does not name, so clients keep to
it); TxnOffsetCommit goes to the group's coordinator (actors/kafka/groups.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode as K

from quorumlog.actors.replica.commands import PassBack
from quorumlog.consumers.state import GROUPS_TOPIC, groups_partition
from quorumlog.log.transactions import number_and_epoch, txn_producer
from quorumlog.transactions.state import TRANSACTIONS_TOPIC
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import AdminReply, ErrorCode, ErrorReply, Message, TxnRequest

if TYPE_CHECKING:
    from quorumlog.actors.kafka.cluster import KafkaBrokers
    from quorumlog.actors.kafka.host import KafkaHost
    from quorumlog.actors.replica.actor import ReplicaActor

TRANSACTION = 1  # FindCoordinator's key type of a transactional id
VERIFIED_KEPT = 64  # per partition, past this the producers with no open transaction go

# The coordinator's refusals (TxnError.code) as Kafka's errors.
ERRORS = {
    "producer_fenced": K.producer_fenced,
    "invalid_producer_id_mapping": K.invalid_producer_id_mapping,
    "concurrent_transactions": K.concurrent_transactions,
    "invalid_txn_state": K.invalid_txn_state,
    "invalid_transaction_timeout": K.invalid_transaction_timeout,
    "unknown_topic_or_partition": K.unknown_topic_or_partition,
    "transactional_id_not_found": K.transactional_id_not_found,
}


def coordinator_error(reply: Message) -> K:
    """A coordinator's answer as a Kafka error (none: K.none)."""
    if isinstance(reply, AdminReply):
        code = reply.result.get("error")
        return K.none if code is None else ERRORS.get(code, K.unknown_server_error)
    if isinstance(reply, ErrorReply) and reply.code is ErrorCode.NOT_LEADER:
        return K.not_coordinator
    return K.coordinator_not_available


class KafkaTransactions:
    def __init__(self, node: KafkaHost, brokers: KafkaBrokers):
        self.node = node
        self.brokers = brokers
        # Per partition replica led here: transactional producer number -> the epoch its
        # coordinator said has the partition in its open transaction (`check_append`).
        self.verified: dict[tuple[str, int], dict[int, int]] = {}

    async def find_coordinator(self, key: str) -> dict:
        """FindCoordinator of a transactional id: the leader of its partition."""
        try:
            partition = await self.node.txn_coordinator.partition_of(key)
        except PassBack:
            return {"error_code": K.coordinator_not_available, "node_id": -1}
        leader = self.node.controller_actor.leader_hint(TRANSACTIONS_TOPIC, partition)
        address = (await self.brokers.known()).get(leader)
        if address is None:
            return {"error_code": K.coordinator_not_available, "node_id": -1}
        host, _, port = address.rpartition(":")
        return {"node_id": leader, "host": host.strip("[]"), "port": int(port)}

    async def _call(self, op: str, name: str, args: dict) -> tuple[K, dict]:
        reply = await self.node.txn_coordinator.handle(TxnRequest(op, name, args))
        error = coordinator_error(reply)
        return error, reply.result if isinstance(reply, AdminReply) else {}

    async def init_producer_id(self, request, version: int) -> dict:
        """A transactional producer's session: its id and epoch."""
        args = {
            "timeout_ms": int(request.transaction_timeout.total_seconds() * 1000),
            "number": getattr(request, "producer_id", -1),
            "epoch": getattr(request, "producer_epoch", -1),
        }
        error, result = await self._call("init_producer", request.transactional_id, args)
        if error is not K.none:
            return {"error_code": error, "producer_id": -1, "producer_epoch": -1}
        return {"producer_id": result["number"], "producer_epoch": result["epoch"]}

    async def add_partitions_to_txn(self, request, version: int) -> dict:
        """v0-3: a producer's own call (v4 on, brokers' batches, are not served)."""
        topics = request.v3_and_below_topics
        args = {
            "number": request.v3_and_below_producer_id,
            "epoch": request.v3_and_below_producer_epoch,
            "partitions": [(t.name, p) for t in topics for p in t.partitions],
        }
        error, _ = await self._call("add_partitions", request.v3_and_below_transactional_id, args)
        return {
            "results_by_topic_v3_and_below": [
                {
                    "name": t.name,
                    "results_by_partition": [
                        {"partition_index": p, "partition_error_code": error} for p in t.partitions
                    ],
                }
                for t in topics
            ]
        }

    async def end_txn(self, request, version: int) -> dict:
        args = {
            "number": request.producer_id,
            "epoch": request.producer_epoch,
            "commit": request.committed,
        }
        error, _ = await self._call("end", request.transactional_id, args)
        return {"error_code": error}

    async def check_append(
        self, group: ReplicaActor, topic: str, partition: int, name: str | None, pid: int
    ) -> K:
        """Whether a transaction's batch of producer `pid` (number and epoch) may go into
        the partition: its coordinator said (or had said, for the transaction open there
        now) that the transaction is open and has the partition."""
        number, epoch = number_and_epoch(pid)
        verified = self.verified.setdefault((topic, partition), {})
        open_txns = group.log.open_transactions()
        if verified.get(number) == epoch and txn_producer(pid) in open_txns:
            return K.none
        if len(verified) > VERIFIED_KEPT:  # those of transactions ended since go
            for ended in [n for n in verified if n not in open_txns]:
                del verified[ended]
        error = await self.verify(name, number, epoch, topic, partition)
        if error is K.none:
            verified[number] = epoch
        return error

    async def verify(
        self, name: str | None, number: int, epoch: int, topic: str, partition: int
    ) -> K:
        """Whether the coordinator of `name` says the producer's open transaction has the
        partition (a coordinator out of reach: a retriable error, the client sends again)."""
        if name is None:
            return K.invalid_txn_state
        args = {"number": number, "epoch": epoch, "topic": topic, "partition": partition}
        try:
            reply = await self.node.txn_coordinator.ask_coordinator(
                name, TxnRequest("verify", name, args)
            )
        except (PassBack, ConnectionClosed):
            reply = None
        error = coordinator_error(reply) if reply is not None else K.coordinator_not_available
        if error in (K.not_coordinator, K.coordinator_not_available):
            return K.not_enough_replicas
        return error

    async def add_offsets_to_txn(self, request, version: int) -> dict:
        """The group's `__groups` partition joins the transaction: its positions are
        committed with it (TxnOffsetCommit, to the group's coordinator)."""
        try:
            topic = await self.node.coordinator.groups_topic()
        except PassBack:
            return {"error_code": K.coordinator_not_available}
        partition = groups_partition(request.group_id, len(topic.partitions))
        args = {
            "number": request.producer_id,
            "epoch": request.producer_epoch,
            "partitions": [(GROUPS_TOPIC, partition)],
        }
        error, _ = await self._call("add_partitions", request.transactional_id, args)
        return {"error_code": error}
