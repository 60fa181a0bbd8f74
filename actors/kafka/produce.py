"""Produce and InitProducerId: Kafka's record batches appended as they arrive.

Each partition's batches become one append to its group, stored unchanged inside a
quorumlog batch (`log/kafka_batch.py`). Appends are put in the group's mailbox in the
order the requests came (the listener calls `submit` before it reads the next request),
so a producer's pipelined requests land in order. An idempotent Kafka producer's id and
epoch make one quorumlog producer id, its base sequence the append's sequence: a retried
batch is answered with its first offsets, as any idempotent append.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import trio
from kio.schema.errors import ErrorCode as K

from quorumlog.actors.kafka.cluster import kafka_error
from quorumlog.log import kafka_batch
from quorumlog.log.batch import MAX_TIMESTAMP, TRANSACTIONAL, BatchError, Compression, build_batch
from quorumlog.log.kafka_batch import TRANSACTIONAL as TXN_BIT
from quorumlog.log.transactions import producer_id
from quorumlog.transport.messages import Acks, AppendReply, AppendRequest, ErrorReply, Message

if TYPE_CHECKING:
    from quorumlog.actors.cluster.member import ClusterMember
    from quorumlog.actors.kafka.transactions import KafkaTransactions

ACKS = {0: Acks.NONE, 1: Acks.LEADER, -1: Acks.QUORUM}
PRODUCER_ID_BITS = 46  # Kafka's id, then 16 bits of epoch, make a quorumlog producer id
WAIT_S_MIN = 1.0


class Produce:
    def __init__(self, node: ClusterMember, rng: random.Random, transactions: KafkaTransactions):
        self.node = node
        self.rng = rng
        self.transactions = transactions

    async def init_producer_id(self, request, version: int) -> dict:
        """An idempotent producer's id (a transactional one is refused before: transactions.py)."""
        return {"producer_id": self.rng.getrandbits(PRODUCER_ID_BITS), "producer_epoch": 0}

    async def submit(self, request, version: int) -> ProduceAnswer:
        """Put every partition's append in its group's mailbox, now and in order; returns
        the answer they make as they are answered (no task waits for them)."""
        acks = ACKS.get(request.acks)
        answer = ProduceAnswer(acks, max(request.timeout.total_seconds(), WAIT_S_MIN))
        transactional_id = getattr(request, "transactional_id", None)
        for topic in request.topic_data:
            for part in topic.partition_data:
                arrived = answer.expect(topic.name, part.index)
                if acks is None:
                    arrived(K.invalid_required_acks)
                else:
                    await self._append(
                        topic.name, part.index, part.records, acks, arrived, transactional_id
                    )
        answer.all_expected()
        return answer

    async def _append(
        self,
        topic: str,
        partition: int,
        records: bytes | None,
        acks: Acks,
        arrived: Callable[[Message | K], None],
        transactional_id: str | None,
    ) -> None:
        group = self.node.replica(topic, partition)
        if group is None:
            found = self.node.controller_actor.state.topics.get(topic)
            known = found is not None and 0 <= partition < len(found.partitions)
            arrived(K.not_leader_or_follower if known else K.unknown_topic_or_partition)
            return
        checked = _checked(records)
        if isinstance(checked, K):
            arrived(checked)
            return
        append = self._request(topic, partition, checked, acks)
        transactional = bool(append.producer_id >= 0 and checked[0][0][0].attributes & TXN_BIT)
        if transactional:
            refusal = await self.transactions.check_append(
                group, topic, partition, transactional_id, append.producer_id
            )
            if refusal is not K.none:
                arrived(refusal)
                return
        if not group.take_append(append, arrived, transactional=transactional):
            # The mailbox was full: wait for room.
            arrived(await group.append(append, transactional=transactional))

    @staticmethod
    def _request(topic: str, partition: int, checked: list, acks: Acks) -> AppendRequest:
        first = checked[0][0][0]
        idempotent = first.producer_id >= 0
        pid = producer_id(first.producer_id, first.producer_epoch) if idempotent else -1
        seq = first.base_sequence if idempotent else -1
        return AppendRequest(
            b"".join(
                build_batch(
                    view,  # copied once, behind the header
                    record_count=h.records_count,
                    compression=Compression.KAFKA,
                    producer_id=pid,
                    producer_seq=seq,
                    timestamp_ms=max_ts,
                    flags=MAX_TIMESTAMP | (TRANSACTIONAL if h.attributes & TXN_BIT else 0),
                )
                for (h, view), max_ts in checked
            ),
            acks,
            pid,
            seq,
            topic,
            partition,
        )


class ProduceAnswer:
    """One Produce request's answer, put together as its partitions' appends are answered.
    No task waits for it: the listener is told when it is complete (`when_complete`), and
    asks for it as it stands when the request's timeout passes first (`expire`): the
    partitions not answered by then answer REQUEST_TIMED_OUT."""

    def __init__(self, acks: Acks | None, wait_s: float) -> None:
        self.deadline = trio.current_time() + wait_s
        self._no_response = acks is Acks.NONE  # acks=0: Kafka sends none
        self._partitions: list[tuple[str, int, dict | None]] = []
        self._left = 0
        self._expected = False
        self._complete: Callable[[dict | None], None] | None = None
        self._done = False

    def expect(self, topic: str, index: int) -> Callable[[Message | K], None]:
        """What the append to one partition calls with its reply (or a refusal)."""
        position = len(self._partitions)
        self._partitions.append((topic, index, None))
        self._left += 1
        return partial(self._arrived, position)

    def all_expected(self) -> None:
        self._expected = True
        self._finish_if_complete()

    def when_complete(self, complete: Callable[[dict | None], None]) -> None:
        self._complete = complete
        self._finish_if_complete()

    def expire(self) -> dict | None:
        """The answer as it stands; whatever arrives later is not in it."""
        self._done = True
        for position, (topic, index, result) in enumerate(self._partitions):
            if result is None:
                self._partitions[position] = (topic, index, _result(index, K.request_timed_out))
        return self._values()

    def _arrived(self, position: int, reply: Message | K) -> None:
        if self._done:
            return  # answered as timed out already
        topic, index, _ = self._partitions[position]
        self._partitions[position] = (topic, index, _partition_result(index, reply))
        self._left -= 1
        self._finish_if_complete()

    def _finish_if_complete(self) -> None:
        if self._left or not self._expected or self._complete is None or self._done:
            return
        self._done = True
        self._complete(self._values())

    def _values(self) -> dict | None:
        if self._no_response:
            return None
        results: dict[str, list[dict]] = {}
        for topic, _, result in self._partitions:
            results.setdefault(topic, []).append(result)
        return {
            "responses": [
                {"name": name, "partition_responses": parts} for name, parts in results.items()
            ]
        }


def _checked(records: bytes | None) -> K | list:
    """The batches of a partition's records with their largest times, or why they are
    refused."""
    try:
        batches = kafka_batch.split_batches(records or b"")
        max_timestamps = []
        for header, view in batches:
            kafka_batch.check_for_append(header)
            # What native readers will decode, and its largest time (the time index's).
            max_timestamps.append(kafka_batch.check_records(view, header))
    except kafka_batch.UnsupportedCompressionError:
        return K.unsupported_compression_type
    except BatchError:
        return K.corrupt_message
    if not batches:
        return K.invalid_record
    if batches[0][0].producer_id >= 0 and len(batches) != 1:
        return K.invalid_record  # as Kafka: an idempotent produce is one batch
    return list(zip(batches, max_timestamps, strict=True))


def _partition_result(index: int, reply: Message | K) -> dict:
    if isinstance(reply, K):
        return _result(index, reply)
    if isinstance(reply, AppendReply):
        base = reply.first_offset if reply.first_offset is not None else -1
        return {"index": index, "base_offset": base}
    assert isinstance(reply, ErrorReply)
    return _result(index, kafka_error(reply), reply.message)


def _result(index: int, error: K, message: str | None = None) -> dict:
    return {"index": index, "error_code": error, "base_offset": -1, "error_message": message}
