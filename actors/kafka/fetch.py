"""Fetch and ListOffsets: committed records, as Kafka record batches.

A batch a Kafka producer wrote goes back as it came, with its base offset patched; a batch
written natively is encoded into Kafka's format. Offsets are record offsets (Raft's own
batches take none: log/offsets.py), so they have no holes. The high watermark is the offset
after the last committed record: nothing uncommitted is ever served (I5). A fetch that
finds less than `min_bytes` waits, up to `max_wait`, for its partitions to commit more; one
response carries at most the request's `max_bytes` (and FETCH_BYTES_MAX), except for a
first batch larger than that.

The last stable offset is where the earliest transaction still open begins (the high
watermark when none is: log/transactions.py). A read_committed fetch reads no further, and
is told the aborted transactions among what it gets, whose records the client drops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
from kio.schema.errors import ErrorCode as K

from quorumlog.actors.kafka.cluster import kafka_error
from quorumlog.actors.replica.read_index import offset_for_time, read_committed
from quorumlog.log import kafka_batch
from quorumlog.log.batch import COMPACTED, TRANSACTIONAL, TXN_MARKER, Compression, split_batches
from quorumlog.log.records import batch_records, offset_records
from quorumlog.log.transactions import marker_of, number_and_epoch
from quorumlog.transport.messages import ErrorReply, OffsetForTimeReply

if TYPE_CHECKING:
    from quorumlog.actors.cluster.member import ClusterMember
    from quorumlog.actors.replica.actor import ReplicaActor
    from quorumlog.actors.replica.handle import GroupView
    from quorumlog.log.wal import Log

LATEST, EARLIEST = -1, -2
READ_COMMITTED = 1  # a Fetch's or ListOffsets' isolation level
# The most one Fetch response carries, whatever the client asks (Kafka's broker default,
# fetch.max.bytes, is 55 MiB): a fetch of a thousand partitions must not read a thousand
# MiB into the node's memory.
FETCH_BYTES_MAX = 50 * 1024 * 1024
# Leader epochs are left out (-1): clients then skip KIP-320's truncation checks, which
# need OffsetForLeaderEpoch; a Raft log never loses a committed record anyway.
NO_EPOCH = -1


class Fetch:
    def __init__(self, node: ClusterMember):
        self.node = node

    async def fetch(self, request, version: int) -> dict:
        wanted = [(t.topic, p) for t in request.topics for p in t.partitions]
        deadline = trio.current_time() + request.max_wait.total_seconds()
        # The response's bytes, all partitions together (v3 on; a broker's cap besides).
        limit = min(getattr(request, "max_bytes", None) or FETCH_BYTES_MAX, FETCH_BYTES_MAX)
        stable_only = getattr(request, "isolation_level", 0) == READ_COMMITTED
        while True:
            answers, size = [], 0
            for topic, p in wanted:
                # Kafka's rule: past the limit the partitions still answer, with no records;
                # the first one with records gets at least one whole batch.
                room = min(p.partition_max_bytes, limit - size) if size < limit else 0
                group, answer = self._read(topic, p.partition, p.fetch_offset, room, stable_only)
                records = answer.get("records") or b""
                if size and len(records) > room:  # a first batch larger than what is left
                    answer["records"] = records = b""
                answers.append((group, answer))
                size += len(records)
            waiting = [g for g, a in answers if g is not None and a["error_code"] == K.none]
            if size >= request.min_bytes or not waiting or trio.current_time() >= deadline:
                break
            with trio.move_on_at(deadline):
                await _any_changed(waiting)
        responses: dict[str, list[dict]] = {}
        for (topic, _), (_, answer) in zip(wanted, answers, strict=True):
            responses.setdefault(topic, []).append(answer)
        return {"responses": [{"topic": t, "partitions": parts} for t, parts in responses.items()]}

    def _read(
        self, topic: str, partition: int, offset: int, max_bytes: int, stable_only: bool
    ) -> tuple[ReplicaActor | None, dict]:
        # Empty records, never null, with an error too: librdkafka fails to parse a
        # partition whose records are null ("Protocol parse failure for Fetch").
        group, error = self._leader(topic, partition)
        if group is None:
            return None, {"partition_index": partition, "error_code": error, "records": b""}
        log, commit = group.log, group.view.commit_offset
        stable = log.first_unstable(commit)
        answer = {
            "partition_index": partition,
            "high_watermark": group.last_record(commit) + 1,
            "last_stable_offset": group.last_record(stable - 1) + 1,
            "log_start_offset": group.record_start(),
            "records": b"",
        }
        if stable_only:
            answer["aborted_transactions"] = []
        if offset > group.last_record(group.log.dirty_offset) + 1:
            # Past the log's end, as Kafka answers it: the client resets its position (a
            # fetch between the committed and the log's end waits instead).
            return group, {**answer, "error_code": K.offset_out_of_range}
        if max_bytes <= 0:
            return group, {**answer, "error_code": K.none}
        reply = read_committed(group, offset, max_bytes, stable - 1 if stable_only else None)
        if isinstance(reply, ErrorReply):
            return group, {**answer, "error_code": kafka_error(reply)}
        if reply.batches:
            answer["records"] = as_kafka(reply.batches)
            if stable_only:
                answer["aborted_transactions"] = _aborted(log, offset, reply.batches)
        return group, {**answer, "error_code": K.none}

    def _leader(self, topic: str, partition: int) -> tuple[ReplicaActor | None, K]:
        group = self.node.replica(topic, partition)
        if group is not None and group.view.is_leader:
            return group, K.none
        found = self.node.controller_actor.state.topics.get(topic)
        if found is None or not 0 <= partition < len(found.partitions):
            return None, K.unknown_topic_or_partition
        return None, K.not_leader_or_follower

    async def list_offsets(self, request, version: int) -> dict:
        stable_only = getattr(request, "isolation_level", 0) == READ_COMMITTED
        topics = []
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                group, error = self._leader(topic.name, p.partition_index)
                answer = {"partition_index": p.partition_index, "error_code": error}
                if group is not None:
                    answer["offset"], answer["timestamp"] = _offset_for(
                        group, p.timestamp, stable_only
                    )
                parts.append(answer)
            topics.append({"name": topic.name, "partitions": parts})
        return {"topics": topics}

    async def offset_for_leader_epoch(self, request, version: int) -> dict:
        """Where each asked leader epoch (a term) ended: the offset after its last committed
        record, and the largest term up to it; a client compares it with its position to
        see a truncation after a leader change (KIP-101; a Raft log never drops committed
        records, so a reader of committed records never finds one)."""
        topics = []
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                group, error = self._leader(topic.topic, p.partition)
                answer = {"partition": p.partition, "error_code": error}
                if group is not None:
                    answer["leader_epoch"], answer["end_offset"] = _epoch_end(group, p.leader_epoch)
                parts.append(answer)
            topics.append({"topic": topic.topic, "partitions": parts})
        return {"topics": topics}


def _epoch_end(group: ReplicaActor, epoch: int) -> tuple[int, int]:
    """(the largest term <= `epoch`, the offset after its last committed record); -1s when
    the log holds no record of a term that old (Kafka's UNDEFINED_EPOCH)."""
    view, log = group.view, group.log
    if epoch > view.term:
        return -1, -1  # a term this leader has not reached: Kafka's UNDEFINED_EPOCH
    if epoch == view.term:
        return view.term, group.last_record(view.commit_offset) + 1
    last = log.last_offset_of_term(epoch)
    if last is None or last < log.log_start_offset:
        return -1, -1
    last = min(last, view.commit_offset)
    term = log.term_at(last) if last >= log.log_start_offset else -1
    return term, group.last_record(last) + 1


async def _any_changed(groups: list[ReplicaActor]) -> None:
    """Until one of `groups` has published a new view (its commit may have moved)."""
    async with trio.open_nursery() as nursery:
        for group in groups:

            async def wait(group: ReplicaActor = group, seen: GroupView = group.view) -> None:
                await group.changed(seen)
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait)


def _offset_for(group: ReplicaActor, timestamp: int, stable_only: bool) -> tuple[int, int]:
    """Kafka's ListOffsets: (offset, timestamp) of the high watermark (latest; the last
    stable offset for a read_committed client), the log start (earliest), or the first
    committed record stamped at or after `timestamp`, by the log's time index (-1, -1 if
    none, as Kafka answers)."""
    if timestamp == LATEST:
        commit = group.view.commit_offset
        end = group.log.first_unstable(commit) - 1 if stable_only else commit
        return group.last_record(end) + 1, -1
    if timestamp == EARLIEST:
        return group.record_start(), -1
    reply = offset_for_time(group, timestamp)
    if not isinstance(reply, OffsetForTimeReply) or reply.offset is None:
        return -1, -1  # none that late, or a special time this node does not know (-3: max)
    return reply.offset, reply.timestamp_ms


def _aborted(log: Log, offset: int, batches: bytes) -> list[dict]:
    """The aborted transactions with batches among `batches` (read from the record
    `offset`), as a read_committed client needs them: the producer and the record offset
    of its first batch, from which it drops that producer's transactional batches until
    the abort marker."""
    last = offset
    for header, _ in split_batches(batches):
        last = header.last_offset
    return [
        {"producer_id": a.producer, "first_offset": log.records_before(a.first)}
        for a in log.aborted_between(log.position_of(offset), log.position_of(last))
    ]


def as_kafka(data: bytes) -> bytes:
    """quorumlog's data batches (a read's) as Kafka record batches, offsets unchanged."""
    out = []
    for header, view in split_batches(data):
        transaction = (
            number_and_epoch(header.producer_id)
            if header.flags & (TRANSACTIONAL | TXN_MARKER)
            else None
        )
        if header.compression is Compression.KAFKA:
            payload = view[len(view) - header.payload_bytes :]
            out.append(kafka_batch.placed(payload, header.base_offset, NO_EPOCH))
        elif header.flags & TXN_MARKER:
            marker = marker_of(view, header)
            out.append(
                kafka_batch.control_batch(
                    header.base_offset,
                    NO_EPOCH,
                    transaction,
                    marker.commit,
                    marker.coordinator_epoch,
                    header.timestamp_ms,
                )
            )
        elif header.flags & COMPACTED:  # holes where the cleaner removed records
            kept = offset_records(view, header)
            records = [tuple(r) for _, r in kept]
            deltas = [at - header.base_offset for at, _ in kept]
            span = header.record_count
            out.append(
                kafka_batch.encode_batch(
                    header.base_offset, NO_EPOCH, records, deltas, span, transaction
                )
            )
        else:
            records = [tuple(r) for r in batch_records(view, header)]
            out.append(
                kafka_batch.encode_batch(
                    header.base_offset, NO_EPOCH, records, transaction=transaction
                )
            )
    return b"".join(out)
