"""The Spark data source: read the log as a batch or a stream, write DataFrames to it.

    spark.dataSource.register(QuorumLogDataSource)
    spark.read.format("quorumlog").option("brokers", "127.0.0.1:7001").load()
    spark.readStream.format("quorumlog").option("brokers", ...).load()
    df.write.format("quorumlog").option("brokers", ...).mode("append").save()

Columns: offset long, key binary, value binary, timestamp timestamp. Options: `brokers`,
`startingOffset` (earliest | latest | N), `endingOffset` (latest | N, batch reads),
`maxRecordsPerTrigger` (streams), `secretFile`, `timeout` (seconds per call).

Only committed records are read, so a range read twice gives the same rows (Spark replays
a batch after a restart). Writes are at least once: a task Spark retries appends again.
Needs pyspark >= 4.2 (admission control and Trigger.AvailableNow).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from quorumlog.client import Client
from quorumlog.commands import read_secret
from quorumlog.protocol import Record

SCHEMA = "offset long, key binary, value binary, timestamp timestamp"
RECORDS_PER_PARTITION = 200_000
READ_RECORDS_MAX = 10_000
WRITE_RECORDS_PER_APPEND = 1_000
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Options:
    """Plain, picklable settings (readers and writers are pickled to the workers)."""

    brokers: str
    secret: bytes | None
    timeout_s: float
    starting: str
    ending: str
    max_records_per_trigger: int | None

    @classmethod
    def parse(cls, options) -> Options:
        if "brokers" not in options:
            raise ValueError('the quorumlog data source needs .option("brokers", "HOST:PORT,...")')
        limit = options.get("maxRecordsPerTrigger")
        return cls(
            brokers=options["brokers"],
            secret=read_secret(options.get("secretFile")),
            timeout_s=float(options.get("timeout", "30")),
            starting=options.get("startingOffset", "earliest"),
            ending=options.get("endingOffset", "latest"),
            max_records_per_trigger=int(limit) if limit else None,
        )

    def client(self) -> Client:
        return Client(self.brokers, secret=self.secret, timeout=self.timeout_s)

    def resolve(self, client: Client, which: str) -> int:
        """An offset option as the next offset to read: earliest, latest or N."""
        if which == "earliest":
            return client.start_offset()
        if which == "latest":
            return client.end_offset() + 1
        return int(which)


@dataclass
class OffsetRange(InputPartition):
    start: int  # first offset to read
    end: int  # one past the last


def split(start: int, end: int) -> list[OffsetRange]:
    return [
        OffsetRange(s, min(end, s + RECORDS_PER_PARTITION))
        for s in range(start, end, RECORDS_PER_PARTITION)
    ]


def read_range(options: Options, partition: OffsetRange | None) -> Iterator[tuple]:
    """Rows of the committed records in [start, end); deterministic for a given range."""
    if partition is None or partition.start >= partition.end:
        return
    with options.client() as client:
        offset = partition.start
        while offset < partition.end:
            records = client.read(offset, min(READ_RECORDS_MAX, partition.end - offset))
            if not records:
                return
            for r in records:
                if r.offset >= partition.end:
                    return
                ts = EPOCH + datetime.timedelta(milliseconds=r.timestamp_ms or 0)
                yield (r.offset, r.key, r.value, ts)
            offset = records[-1].offset + 1


class QuorumLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "quorumlog"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return BatchReader(Options.parse(self.options))

    def streamReader(self, schema) -> DataSourceStreamReader:
        return StreamReader(Options.parse(self.options))

    def writer(self, schema, overwrite: bool) -> DataSourceWriter:
        return Writer(_writable(Options.parse(self.options), overwrite))

    def streamWriter(self, schema, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(_writable(Options.parse(self.options), overwrite))


def _writable(options: Options, overwrite: bool) -> Options:
    if overwrite:
        raise ValueError("a log is append-only: use .mode('append')")
    return options


class BatchReader(DataSourceReader):
    def __init__(self, options: Options):
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        with self.options.client() as client:
            start = self.options.resolve(client, self.options.starting)
            end = self.options.resolve(client, self.options.ending)
        return split(start, end) or [OffsetRange(start, start)]

    def read(self, partition) -> Iterator[tuple]:
        return read_range(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"offset": NEXT_OFFSET_TO_READ}."""

    def __init__(self, options: Options):
        self.options = options
        self._initial: int | None = None
        self._frozen_end: int | None = None

    def initialOffset(self) -> dict:
        if self._initial is None:  # Spark asks twice; "latest" must not move between
            with self.options.client() as client:
                self._initial = self.options.resolve(client, self.options.starting)
        return {"offset": self._initial}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._frozen_end = self._end()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self._frozen_end if self._frozen_end is not None else self._end()
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["offset"] + limit.max_rows)
        return {"offset": max(end, start["offset"])}

    def _end(self) -> int:
        with self.options.client() as client:
            return client.end_offset() + 1

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        return split(start["offset"], end["offset"])

    def read(self, partition) -> Iterator[tuple]:
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        pass  # the checkpoint is the consumer's position; the log keeps no cursor


@dataclass(frozen=True)
class Appended(WriterCommitMessage):
    records: int


def write_rows(options: Options, rows) -> Appended:
    """Append a task's rows: `value` (binary or string) and, if present, `key`."""
    count = 0
    chunk: list[Record] = []
    with options.client() as client:
        for row in rows:
            fields = row.asDict()
            if fields.get("value") is None:
                raise ValueError("a row to write needs a non-null `value` column")
            key = fields.get("key")
            chunk.append(Record(_bytes(fields["value"]), None if key is None else _bytes(key)))
            if len(chunk) >= WRITE_RECORDS_PER_APPEND:
                client.append(chunk)
                count += len(chunk)
                chunk = []
        if chunk:
            client.append(chunk)
            count += len(chunk)
    return Appended(count)


def _bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class Writer(DataSourceWriter):
    def __init__(self, options: Options):
        self.options = options

    def write(self, iterator) -> Appended:
        return write_rows(self.options, iterator)


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: Options):
        self.options = options

    def write(self, iterator) -> Appended:
        return write_rows(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass
