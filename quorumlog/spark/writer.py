"""Spark's batch and stream writers: a task's rows appended idempotently, under producer ids
derived from the write and the task."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType, TimestampType

from quorumlog.client import Client
from quorumlog.protocol import BATCH_BYTES_MAX, PRODUCER_ID_MAX, Record
from quorumlog.spark.options import Options

# Appends under one producer id: well inside the 1,024 a node remembers per producer.
APPENDS_PER_PRODUCER = 256
WRITE_RECORDS_PER_APPEND = 1_000
RECORD_OVERHEAD_BYTES = 16  # as Producer.requests counts a record, so an append is one batch
WRITABLE_COLUMNS = {"key", "value", "timestamp", "offset"}  # offset is ignored: the log assigns it


def _writable(options: Options, schema: StructType, overwrite: bool) -> Options:
    if overwrite:
        raise ValueError("a log is append-only: use .mode('append')")
    types = {f.name.lower(): f.dataType for f in schema.fields}
    extra = sorted(set(types) - WRITABLE_COLUMNS)
    if extra:
        raise ValueError(
            f"the quorumlog sink writes columns value, key and timestamp; unexpected: {extra}"
        )
    if not isinstance(types.get("value"), BinaryType | StringType):
        raise ValueError("the quorumlog sink needs a `value` column of type binary or string")
    if "key" in types and not isinstance(types["key"], BinaryType | StringType):
        raise ValueError("the `key` column must be of type binary or string")
    if "timestamp" in types and not isinstance(types["timestamp"], TimestampType):
        raise ValueError("the `timestamp` column must be of type timestamp")
    return options


@dataclass(frozen=True)
class Appended(WriterCommitMessage):
    """What one task wrote: `records` records at offsets first_offset..last_offset (other
    writers' records may lie between; -1, -1 when it wrote none)."""

    records: int
    first_offset: int = -1
    last_offset: int = -1
    producer_ids: tuple[int, ...] = ()


def producer_id(task: str, chunk: int) -> int:
    """The producer id of a task's `chunk`-th run of APPENDS_PER_PRODUCER appends: the same
    on every attempt of the task, distinct across tasks and writes (a 62-bit hash)."""
    digest = hashlib.blake2b(f"{task}/{chunk}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & PRODUCER_ID_MAX


def write_rows(options: Options, task: str, rows: Iterable) -> Appended:
    """Append a task's rows (`value`, optional `key` and `timestamp`) idempotently: `task`
    names the task the same way on every attempt (write id, micro-batch, partition)."""
    records = appends = 0
    first_offset = last_offset = -1
    producer_ids: list[int] = []
    client: Client | None = None
    try:
        for chunk in _appends(rows):
            if appends % APPENDS_PER_PRODUCER == 0:  # the next producer id takes over
                if client is not None:
                    client.close()
                producer_ids.append(producer_id(task, len(producer_ids)))
                client = options.client(producer_id=producer_ids[-1])
            assert client is not None
            result = client.append(chunk, acks="quorum", details=True)
            appends += 1
            records += len(chunk)
            first_offset = result.first_offset if first_offset < 0 else first_offset
            last_offset = result.last_offset
    finally:
        if client is not None:
            client.close()
    return Appended(records, first_offset, last_offset, tuple(producer_ids))


def _appends(rows: Iterable) -> Iterator[list[Record]]:
    """Rows as lists of records that each fit in one batch (so one append is one sequence
    number and a producer id's appends stay countable)."""
    chunk: list[Record] = []
    chunk_bytes = 0
    for row in rows:
        fields = row.asDict()
        value, key = fields.get("value"), fields.get("key")
        if value is None:
            raise ValueError("a row to write needs a non-null `value`")
        stamp = fields.get("timestamp")
        record = Record(
            _bytes(value),
            None if key is None else _bytes(key),
            None if stamp is None else int(stamp.timestamp() * 1000),
        )
        size = len(record.value) + len(record.key or b"") + RECORD_OVERHEAD_BYTES
        if chunk and (
            chunk_bytes + size > BATCH_BYTES_MAX or len(chunk) >= WRITE_RECORDS_PER_APPEND
        ):
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk.append(record)
        chunk_bytes += size
    if chunk:
        yield chunk


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
        self.write_id = uuid.uuid4().hex  # made on the driver, the same in every task

    def write(self, iterator) -> Appended:
        task = f"{self.write_id}/{_task_context().partitionId()}"
        return write_rows(self.options, task, iterator)


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Options):
        self.options = options
        self.write_id = uuid.uuid4().hex

    def write(self, iterator) -> Appended:
        context = _task_context()
        # The query id is kept in the checkpoint: a micro-batch replayed after a restart
        # is recognised too, not only a retried task.
        query = context.getLocalProperty("sql.streaming.queryId") or self.write_id
        batch = context.getLocalProperty("streaming.sql.batchId")
        task = f"{query}/{batch}/{context.partitionId()}"
        return write_rows(self.options, task, iterator)

    def commit(self, messages, batchId: int) -> None:
        pass  # the records are in the log already; nothing to make visible

    def abort(self, messages, batchId: int) -> None:
        pass  # appends cannot be undone; a retry of the batch is deduplicated instead
