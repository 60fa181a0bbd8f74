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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from kio.schema.errors import ErrorCode as K

from quorumlog.actors.kafka.cluster import kafka_error
from quorumlog.actors.mailbox import Pending
from quorumlog.log import kafka_batch
from quorumlog.log.batch import MAX_TIMESTAMP, BatchError, Compression, build_batch
from quorumlog.transport.messages import Acks, AppendReply, AppendRequest, ErrorReply

if TYPE_CHECKING:
    from quorumlog.actors.node import Node

ACKS = {0: Acks.NONE, 1: Acks.LEADER, -1: Acks.QUORUM}
PRODUCER_ID_BITS = 46  # Kafka's id, then 16 bits of epoch, make a quorumlog producer id
WAIT_S_MIN = 1.0


def producer_id(kafka_id: int, epoch: int) -> int:
    return (kafka_id << 16) | (epoch & 0xFFFF)


class Produce:
    def __init__(self, node: Node, rng: random.Random):
        self.node = node
        self.rng = rng

    async def init_producer_id(self, request, version: int) -> dict:
        """An idempotent producer's id (a transactional one is refused before: transactions.py)."""
        return {"producer_id": self.rng.getrandbits(PRODUCER_ID_BITS), "producer_epoch": 0}

    async def submit(self, request, version: int) -> Callable[[], Awaitable[dict | None]]:
        """Put every partition's append in its group's mailbox, now and in order; returns
        what waits for the answers (None for acks=0: Kafka sends no response)."""
        acks = ACKS.get(request.acks)
        waits: list[tuple[str, int, Pending | K]] = []
        for topic in request.topic_data:
            for part in topic.partition_data:
                if acks is None:
                    outcome: Pending | K = K.invalid_required_acks
                else:
                    outcome = await self._append(topic.name, part.index, part.records, acks)
                waits.append((topic.name, part.index, outcome))
        wait_s = max(request.timeout.total_seconds(), WAIT_S_MIN)

        async def answers() -> dict | None:
            results: dict[str, list[dict]] = {}
            with trio.move_on_after(wait_s):
                for name, index, outcome in waits:
                    results.setdefault(name, []).append(await _answer(index, outcome))
            for name, index, _ in waits[sum(map(len, results.values())) :]:
                results.setdefault(name, []).append(_result(index, K.request_timed_out))
            if acks is Acks.NONE:
                return None
            return {
                "responses": [
                    {"name": name, "partition_responses": parts} for name, parts in results.items()
                ]
            }

        return answers

    async def _append(
        self, topic: str, partition: int, records: bytes | None, acks: Acks
    ) -> Pending | K:
        group = self.node.replica(topic, partition)
        if group is None:
            found = self.node.controller_actor.state.topics.get(topic)
            known = found is not None and 0 <= partition < len(found.partitions)
            return K.not_leader_or_follower if known else K.unknown_topic_or_partition
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
        first = batches[0][0]
        idempotent = first.producer_id >= 0
        if idempotent and len(batches) != 1:
            return K.invalid_record  # as Kafka: an idempotent produce is one batch
        pid = producer_id(first.producer_id, first.producer_epoch) if idempotent else -1
        seq = first.base_sequence if idempotent else -1
        append = AppendRequest(
            b"".join(
                build_batch(
                    view,  # copied once, behind the header
                    record_count=h.records_count,
                    compression=Compression.KAFKA,
                    producer_id=pid,
                    producer_seq=seq,
                    timestamp_ms=max_ts,
                    flags=MAX_TIMESTAMP,
                )
                for (h, view), max_ts in zip(batches, max_timestamps, strict=True)
            ),
            acks,
            pid,
            seq,
            topic,
            partition,
        )
        pending = Pending()
        if not group.take_append(append, pending.resolve):
            pending.resolve(await group.append(append))  # the mailbox was full: wait for room
        return pending


async def _answer(index: int, outcome: Pending | K) -> dict:
    if isinstance(outcome, K):
        return _result(index, outcome)
    reply = await outcome.wait()
    if isinstance(reply, AppendReply):
        base = reply.first_offset if reply.first_offset is not None else -1
        return {"index": index, "base_offset": base}
    assert isinstance(reply, ErrorReply)
    return _result(index, kafka_error(reply), reply.message)


def _result(index: int, error: K, message: str | None = None) -> dict:
    return {"index": index, "error_code": error, "base_offset": -1, "error_message": message}
