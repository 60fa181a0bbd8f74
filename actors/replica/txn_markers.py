"""A transaction's marker in one partition, written by the partition's leader on its
coordinator's word (TxnMarkerRequest, Kafka's WriteTxnMarkers). Where the transaction
began here comes from the log's open transactions (log/transactions.py): the producer's
batches were acknowledged before its coordinator decided, so they are in the log. A
marker asked for again (the coordinator retried) finds the transaction ended and says it
wrote nothing here: it changes nothing a reader sees."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quorumlog.log.transactions import TxnMarker, make_marker_batch, txn_producer
from quorumlog.transport.messages import Acks, AppendRequest, Message, TxnMarkerRequest

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor


async def write_marker(group: ReplicaActor, request: TxnMarkerRequest) -> Message:
    """Append the marker with acks=quorum; its position once committed, or the refusal."""
    first = group.log.open_transactions().get(txn_producer(request.producer_id), -1)
    marker = TxnMarker(request.commit, request.coordinator_epoch, first)
    batch = make_marker_batch(request.producer_id, marker, group.wall_clock_ms())
    append = AppendRequest(batch, Acks.QUORUM, -1, -1, request.topic, request.partition)
    return await group.append(append, by_client=False)
