"""Spark's batch and stream writers: a task's rows appended idempotently, each to its
partition of the topic, under producer ids derived from the write, the task and the
partition."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from quorumlog.client.client import Client
from quorumlog.client.partitioner import partition_of_key
from quorumlog.client.protocol import BATCH_BYTES_MAX, PRODUCER_ID_MAX, Record
from quorumlog.spark.options import Options, planning
from quorumlog.spark.ranges import topic_replicas

# Appends under one producer id: well inside the 1,024 a node remembers per producer.
APPENDS_PER_PRODUCER = 256
WRITE_RECORDS_PER_APPEND = 1_000
RECORD_OVERHEAD_BYTES = 16  # as Producer.requests counts a record, so an append is one batch
# What a task holds in appends not sent yet, over all partitions (each fills its own).
WRITE_PENDING_BYTES_MAX = 16 * 1024 * 1024
WRITABLE_COLUMNS = {"key", "value", "timestamp", "offset"}  # offset is ignored: the log assigns it
INTEGER_TYPES = IntegerType | LongType | ShortType | ByteType


def _writable(options: Options, schema: StructType, overwrite: bool) -> Options:
    if overwrite:
        raise ValueError("a log is append-only: use .mode('append')")
    types = {f.name.lower(): f.dataType for f in schema.fields}
    # With the `topic` option, a `partition` column (as a topic read has) pins rows.
    writable, named = WRITABLE_COLUMNS, "value, key and timestamp"
    if options.topic is not None:
        writable, named = {*WRITABLE_COLUMNS, "partition"}, "value, key, timestamp and partition"
    extra = sorted(set(types) - writable)
    if extra:
        raise ValueError(f"the quorumlog sink writes columns {named}; unexpected: {extra}")
    if not isinstance(types.get("value"), BinaryType | StringType):
        raise ValueError("the quorumlog sink needs a `value` column of type binary or string")
    if "key" in types and not isinstance(types["key"], BinaryType | StringType):
        raise ValueError("the `key` column must be of type binary or string")
    if "timestamp" in types and not isinstance(types["timestamp"], TimestampType):
        raise ValueError("the `timestamp` column must be of type timestamp")
    if "partition" in types and not isinstance(types["partition"], INTEGER_TYPES):
        raise ValueError("the `partition` column must be of an integer type")
    return options


def _partition_count(options: Options) -> int:
    """The topic's partitions, asked on the driver: an unknown topic fails the write before
    any task runs."""
    if options.topic is None:
        return 1
    with planning(options) as client:
        return len(topic_replicas(client, options.topic))


@dataclass(frozen=True)
class Appended(WriterCommitMessage):
    """What one task wrote to one partition: `records` records at offsets
    first_offset..last_offset (other writers' records may lie between; -1, -1 when it wrote
    none)."""

    records: int
    first_offset: int = -1
    last_offset: int = -1
    producer_ids: tuple[int, ...] = ()
    partition: int = 0


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    """What one task wrote to a topic (`topic` option): what it appended to each partition
    it wrote to, by partition."""

    partitions: tuple[Appended, ...]


def producer_id(task: str, chunk: int) -> int:
    """The producer id of a task's `chunk`-th run of APPENDS_PER_PRODUCER appends: the same
    on every attempt of the task, distinct across tasks and writes (a 62-bit hash)."""
    digest = hashlib.blake2b(f"{task}/{chunk}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & PRODUCER_ID_MAX


def write_rows(
    options: Options, task: str, rows: Iterable, partitions: int = 1
) -> Appended | Written:
    """Append a task's rows (`value`, optional `key`, `timestamp` and `partition`)
    idempotently to the topic's `partitions` partitions: `task` names the task the same way
    on every attempt (write id, micro-batch, partition). Without the `topic` option, what it
    appended to the log; with it, a Written."""
    appends: dict[int, PartitionAppends] = {}
    try:
        for partition, chunk in _appends(rows, Partitioner(task, partitions)):
            if partition not in appends:
                appends[partition] = PartitionAppends(options, task, partition)
            appends[partition].append(chunk)
    finally:
        for partition_appends in appends.values():
            partition_appends.close()
    appended = tuple(appends[p].appended() for p in sorted(appends))
    if options.topic is not None:
        return Written(appended)
    return appended[0] if appended else Appended(0)


class PartitionAppends:
    """A task's appends to one partition (its own Raft group, with its own producer table),
    acks=quorum, APPENDS_PER_PRODUCER under each producer id. Without the `topic` option the
    ids are derived from the task alone, as before the topics (a micro-batch replayed from
    an older checkpoint is still recognised); with it, from the task and the partition."""

    def __init__(self, options: Options, task: str, partition: int):
        self._options = options
        self._task = task if options.topic is None else f"{task}/{partition}"
        self._partition = partition
        self._client: Client | None = None
        self._appends = self._records = 0
        self._first_offset = self._last_offset = -1
        self._producer_ids: list[int] = []

    def append(self, chunk: list[Record]) -> None:
        if self._appends % APPENDS_PER_PRODUCER == 0:  # the next producer id takes over
            self.close()
            self._producer_ids.append(producer_id(self._task, len(self._producer_ids)))
            self._client = self._options.client(producer_id=self._producer_ids[-1])
        assert self._client is not None
        result = self._client.append(
            chunk,
            acks="quorum",
            details=True,
            topic=self._options.topic_name,
            partition=self._partition,
        )
        self._appends += 1
        self._records += len(chunk)
        if self._first_offset < 0:
            self._first_offset = result.first_offset
        self._last_offset = result.last_offset

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def appended(self) -> Appended:
        return Appended(
            self._records,
            self._first_offset,
            self._last_offset,
            tuple(self._producer_ids),
            self._partition,
        )


class Partitioner:
    """Which partition a row goes to: its `partition` column if set; else by its key, as
    the client's partitioner (Kafka's murmur2); else round robin, row by row, from a
    partition that depends on the task. All of it depends on the task's rows and their
    order only, so that a retried task sends the same appends to the same partitions."""

    def __init__(self, task: str, partitions: int):
        self._partitions = partitions
        self._next_unkeyed = partition_of_key(task.encode(), partitions)

    def __call__(self, fields: dict, record: Record) -> int:
        pinned = fields.get("partition")
        if pinned is not None:
            if not 0 <= pinned < self._partitions:
                raise ValueError(
                    f"a row's partition {pinned} is not one of the topic's "
                    f"{self._partitions} partitions"
                )
            return pinned
        if record.key is not None:
            return partition_of_key(record.key, self._partitions)
        self._next_unkeyed += 1
        return (self._next_unkeyed - 1) % self._partitions


def _appends(rows: Iterable, partitioner: Partitioner) -> Iterator[tuple[int, list[Record]]]:
    """Rows as (partition, records) appends that each fit in one batch (so one append is one
    sequence number and a producer id's appends stay countable). Each partition fills its
    own append; past WRITE_PENDING_BYTES_MAX held in all, the biggest one goes."""
    chunks: dict[int, list[Record]] = {}
    sizes: dict[int, int] = {}
    pending_bytes = 0
    for row in rows:
        fields = row.asDict()
        record = _record(fields)
        partition = partitioner(fields, record)
        size = len(record.value or b"") + len(record.key or b"") + RECORD_OVERHEAD_BYTES
        if partition in chunks and (
            sizes[partition] + size > BATCH_BYTES_MAX
            or len(chunks[partition]) >= WRITE_RECORDS_PER_APPEND
        ):
            pending_bytes -= sizes.pop(partition)
            yield partition, chunks.pop(partition)
        chunks.setdefault(partition, []).append(record)
        sizes[partition] = sizes.get(partition, 0) + size
        pending_bytes += size
        if pending_bytes > WRITE_PENDING_BYTES_MAX:
            biggest = max(sizes, key=sizes.__getitem__)
            pending_bytes -= sizes.pop(biggest)
            yield biggest, chunks.pop(biggest)
    yield from chunks.items()


def _record(fields: dict) -> Record:
    value, key = fields.get("value"), fields.get("key")
    if value is None:
        raise ValueError("a row to write needs a non-null `value`")
    stamp = fields.get("timestamp")
    return Record(
        _bytes(value),
        None if key is None else _bytes(key),
        None if stamp is None else int(stamp.timestamp() * 1000),
    )


def _bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _task_context() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("a quorumlog write runs in a Spark task")
    return context


class Writer(DataSourceWriter):
    def __init__(self, options: Options):
        self.options = options
        self.partitions = _partition_count(options)
        self.write_id = uuid.uuid4().hex  # made on the driver, the same in every task

    def write(self, iterator) -> Appended | Written:
        task = f"{self.write_id}/{_task_context().partitionId()}"
        return write_rows(self.options, task, iterator, self.partitions)


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Options):
        self.options = options
        self.partitions = _partition_count(options)
        self.write_id = uuid.uuid4().hex

    def write(self, iterator) -> Appended | Written:
        context = _task_context()
        # The query id is kept in the checkpoint: a micro-batch replayed after a restart
        # is recognised too, not only a retried task.
        query = context.getLocalProperty("sql.streaming.queryId") or self.write_id
        batch = context.getLocalProperty("streaming.sql.batchId")
        task = f"{query}/{batch}/{context.partitionId()}"
        return write_rows(self.options, task, iterator, self.partitions)

    def commit(self, messages, batchId: int) -> None:
        pass  # the records are in the log already; nothing to make visible

    def abort(self, messages, batchId: int) -> None:
        pass  # appends cannot be undone; a retry of the batch is deduplicated instead
