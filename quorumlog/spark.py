"""The Spark data source: read the log as a batch or a stream, write DataFrames to it.

    spark.dataSource.register(QuorumLogDataSource)
    spark.read.format("quorumlog").option("brokers", "127.0.0.1:7001").load()
    spark.readStream.format("quorumlog").option("brokers", ...).load()
    df.write.format("quorumlog").option("brokers", ...).mode("append").save()

Columns: offset long, key binary, value binary, timestamp timestamp. Options (values are
strings, as Spark passes them):

- `brokers` HOST:PORT,...: any members; the others are found through them.
- `startingOffset` earliest | latest | N (default earliest): the first offset to read.
- `endingOffset` latest | N (batch reads, default latest): one past the last offset to read.
- `maxRecordsPerTrigger` N (streams): offsets per micro-batch; none by default.
- `recordsPerPartition` N (default 50,000): offsets per Spark partition.
- `failOnDataLoss` true | false (default true): what to do when records were removed by
  retention before they were read: fail, or skip to the log start (Spark's Kafka source).
- `secretFile` PATH, `timeout` SECONDS (default 30, per call to the cluster).

Reads. Only committed records are read, so a range read twice gives the same rows (Spark
replays a micro-batch after a restart). A read is cut into partitions of
`recordsPerPartition` offsets, so that 100,000 records are two tasks and local[2] reads in
parallel, while a task still reads tens of megabytes, far more than it costs to start. Each
partition reads from one replica that had the range committed when the read was planned,
partition i from the i-th of them, so that the tasks spread over the nodes; a replica that
fails or is behind hands over to the next. Rows go to Spark as Arrow record batches
(about 3x faster than tuples: ../shared/notes/pyspark-datasource.md).

Writes: a retried task does not write twice. Every task appends with acks=quorum under
producer ids derived from the write (an id made on the driver; for streams, the query's id,
which the checkpoint keeps, and the micro-batch) and the partition, with sequence numbers
counted from 0 and one batch per append: a retry, or a micro-batch replayed after a
restart, sends the same (producer id, sequence) pairs, and the leader answers them with the
first run's offsets instead of writing again. That assumes the retry has the same rows in
the same order (a deterministic input, as Spark's own recomputation does); where it does
not, the first run's appends stand for the sequence numbers both sent. A producer id covers
APPENDS_PER_PRODUCER appends, well inside the APPENDS_PER_PRODUCER_MAX each node remembers
per producer (actors/producers.py); nodes forget the least recently used of their 100,000
producers, so a retry after that many other producers wrote may write again. Each task's
commit message (`Appended`) carries its count and first and last offsets.

Needs pyspark >= 4.2 (admission control and Trigger.AvailableNow) and pyarrow.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import structlog
from pyspark import TaskContext
from pyspark.sql import SparkSession
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
from pyspark.sql.types import BinaryType, StringType, StructType, TimestampType

from quorumlog.client import Client
from quorumlog.errors import OffsetOutOfRangeError, QuorumLogError
from quorumlog.protocol import BATCH_BYTES_MAX, PRODUCER_ID_MAX, Record, members_of

SCHEMA = "offset long, key binary, value binary, timestamp timestamp"
# As Spark converts SCHEMA (it checks batches against it, nullability included).
ARROW_SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
RECORDS_PER_PARTITION = 50_000
ROWS_PER_ARROW_BATCH_MAX = 10_000
REPLICA_TIMEOUT_S_MAX = 5.0  # one replica's turn at a call; then the next one
RETRY_PAUSE_S = 0.1
# Appends under one producer id: well inside the 1,024 a node remembers per producer.
APPENDS_PER_PRODUCER = 256
WRITE_RECORDS_PER_APPEND = 1_000
RECORD_OVERHEAD_BYTES = 16  # as Producer.requests counts a record, so an append is one batch
WRITABLE_COLUMNS = {"key", "value", "timestamp", "offset"}  # offset is ignored: the log assigns it
KAFKA_NAMES = {  # options of Spark's Kafka source that users carry over
    "startingoffsets": "startingOffset",
    "endingoffsets": "endingOffset",
    "maxoffsetspertrigger": "maxRecordsPerTrigger",
    "kafka.bootstrap.servers": "brokers",
}


logger = structlog.get_logger("quorumlog.spark")


class DataLossError(QuorumLogError):
    """Records were removed by retention before they were read."""


@dataclass(frozen=True)
class Options:
    """Plain, picklable settings (readers and writers are pickled to the workers)."""

    brokers: tuple[str, ...]
    secret: bytes | None = None
    timeout_s: float = 30.0
    starting: str | int = "earliest"  # earliest | latest | N
    ending: str | int = "latest"  # latest | N
    max_records_per_trigger: int | None = None
    records_per_partition: int = RECORDS_PER_PARTITION
    fail_on_data_loss: bool = True

    @classmethod
    def parse(cls, options) -> Options:
        """Spark's options (a case-insensitive dict of strings), checked: a bad one raises
        ValueError naming the option and what it takes."""
        for name, ours in KAFKA_NAMES.items():
            if name in {k.lower() for k in options}:
                raise ValueError(f"quorumlog has no option {name!r}: use {ours!r}")
        return cls(
            brokers=_brokers(options.get("brokers")),
            secret=_secret(options.get("secretFile")),
            timeout_s=_number(options, "timeout", 30.0, float),
            starting=_offset(options, "startingOffset", "earliest", ("earliest", "latest")),
            ending=_offset(options, "endingOffset", "latest", ("latest",)),
            max_records_per_trigger=_number(options, "maxRecordsPerTrigger", None, int),
            records_per_partition=_number(
                options, "recordsPerPartition", RECORDS_PER_PARTITION, int
            ),
            fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        )

    def client(self, producer_id: int | None = None) -> Client:
        """A client that finds the leader through any of the brokers."""
        return Client(
            self.brokers, secret=self.secret, timeout=self.timeout_s, producer_id=producer_id
        )

    def replica_client(self, address: str) -> Client:
        """A client of one node only: it reads up to the commit offset that node knows."""
        timeout = min(self.timeout_s, REPLICA_TIMEOUT_S_MAX)
        return Client(address, secret=self.secret, timeout=timeout, direct=True)


def _brokers(value: str | None) -> tuple[str, ...]:
    brokers = tuple(b.strip() for b in (value or "").split(",") if b.strip())
    if not brokers:
        raise ValueError('the quorumlog data source needs .option("brokers", "HOST:PORT,...")')
    for broker in brokers:
        host, _, port = broker.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"option brokers: {broker!r} is not HOST:PORT")
    return brokers


def _secret(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            secret = f.read().strip()
    except OSError as exc:
        raise ValueError(f"option secretFile: cannot read {path}: {exc}") from None
    if not secret:
        raise ValueError(f"option secretFile: {path} is empty")
    return secret


def _number(options, name: str, default, kind: type):
    text = options.get(name)
    if text is None:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        unit = "seconds" if kind is float else "an integer"
        raise ValueError(f"option {name} must be a positive number ({unit}), not {text!r}")
    return value


def _offset(options, name: str, default: str, words: tuple[str, ...]) -> str | int:
    text = options.get(name, default).strip().lower()
    if text in words:
        return text
    if text.isdigit():
        return int(text)
    raise ValueError(
        f"option {name} must be {' | '.join(words)} or an offset >= 0, not {options.get(name)!r}"
    )


def _boolean(options, name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {text!r}")
    return text.strip().lower() == "true"


class QuorumLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "quorumlog"

    def schema(self) -> str:
        Options.parse(self.options)  # bad options fail at load(), not at the first action
        return SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return BatchReader(Options.parse(self.options))

    def streamReader(self, schema) -> DataSourceStreamReader:
        return StreamReader(Options.parse(self.options))

    def writer(self, schema, overwrite: bool) -> DataSourceWriter:
        return Writer(_writable(Options.parse(self.options), schema, overwrite))

    def streamWriter(self, schema, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(_writable(Options.parse(self.options), schema, overwrite))


# --- reads -------------------------------------------------------------------------------


@dataclass
class OffsetRange(InputPartition):
    start: int  # first offset to read
    end: int  # one past the last
    # Nodes to read from, in order: those that had the range committed first. None known
    # (no member list): the brokers.
    replicas: tuple[str, ...] = ()


def split(
    start: int, end: int, per_partition: int, ready: Sequence[str], behind: Sequence[str] = ()
) -> list[OffsetRange]:
    """[start, end) in ranges of `per_partition` offsets, the i-th one reading from the i-th
    ready replica first (round robin), then from the other ready ones, then the others."""
    out = []
    for i, s in enumerate(range(start, end, per_partition)):
        turn = i % len(ready) if ready else 0
        replicas = (*ready[turn:], *ready[:turn], *behind)
        out.append(OffsetRange(s, min(end, s + per_partition), replicas))
    return out


def replicas_with(client: Client, last_offset: int) -> tuple[list[str], list[str]]:
    """Addresses of the members that answer: those that have committed `last_offset`, and
    the others, in node id order; nothing if no member list can be had."""
    try:
        statuses = client.status()
    except QuorumLogError:
        return [], []
    addresses: dict[int, str] = {}
    for status in statuses:
        addresses.update(members_of(status))
    ready, behind = [], []
    for status in statuses:
        address = addresses.get(status.get("node_id"))
        if address is None or "commit_offset" not in status:
            continue  # unreachable, or not a member
        (ready if status["commit_offset"] >= last_offset else behind).append(address)
    return ready, behind


def planned(options: Options, client: Client, start: int, end: int) -> list[OffsetRange]:
    if start >= end:
        return [OffsetRange(start, start)]
    ready, behind = replicas_with(client, end - 1)
    return split(start, end, options.records_per_partition, ready, behind)


class RangeReads:
    """Reads of one offset range from the partition's replicas, each asked directly: the
    first that serves the range keeps serving it; on an error the next takes over.

    A node serves reads up to the commit offset it knows, so an empty answer below the
    range's end means "this node is behind" unless the node has committed the whole range
    (then no data records are left: control batches occupy offsets and are skipped). The
    range was committed when it was planned, so some replica has it, or had it.
    """

    def __init__(self, options: Options, partition: OffsetRange):
        self._options = options
        self._end = partition.end
        self._sources = list(partition.replicas or options.brokers)
        self._turn = 0  # the source that answered last
        self._clients: dict[str, Client] = {}

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _client(self, address: str) -> Client:
        if address not in self._clients:
            self._clients[address] = self._options.replica_client(address)
        return self._clients[address]

    def fetch(self, offset: int) -> list[Record]:
        """Records from `offset` on, below the range's end; [] when none are left. Raises
        OffsetOutOfRangeError if every replica that answered no longer holds `offset`."""
        deadline = time.monotonic() + self._options.timeout_s
        while True:
            removed = answered = 0
            for i in range(len(self._sources)):
                turn = (self._turn + i) % len(self._sources)
                client = self._client(self._sources[turn])
                try:
                    records = client.read(offset, ROWS_PER_ARROW_BATCH_MAX)
                    answered += 1
                    if records or client.end_offset() >= self._end - 1:
                        self._turn = turn
                        return [r for r in records if r.offset < self._end]
                except OffsetOutOfRangeError:
                    removed += 1
                    answered += 1
                except QuorumLogError:
                    pass  # down or cut off: the next one
            if answered and removed == answered:
                raise OffsetOutOfRangeError(f"offset {offset} is before every replica's log start")
            # Every replica is down or behind (a new leader learns the commit offset once
            # it commits its barrier): wait, then ask the members again.
            if time.monotonic() + RETRY_PAUSE_S >= deadline:
                raise QuorumLogError(
                    f"offsets {offset}..{self._end - 1} were committed but no node of "
                    f"{','.join(self._sources)} served them within {self._options.timeout_s:g} s"
                )
            time.sleep(RETRY_PAUSE_S)
            self._rediscover()

    def _rediscover(self) -> None:
        with self._options.client() as client:
            ready, behind = replicas_with(client, self._end - 1)
        if ready or behind:
            self._sources, self._turn = ready + behind, 0

    def log_start(self) -> int:
        """The lowest log start of the replicas that answer (where reading can go on)."""
        starts = []
        for address in self._sources:
            try:
                starts.append(self._client(address).start_offset())
            except QuorumLogError:
                continue
        if not starts:
            raise QuorumLogError(f"no node of {','.join(self._sources)} answered")
        return min(starts)


def read_range(options: Options, partition: OffsetRange | None) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the committed records in [start, end); deterministic for a range.

    Records that retention removed before they were read fail the read (DataLossError) or,
    with failOnDataLoss=false, are skipped.
    """
    if partition is None or partition.start >= partition.end:
        return  # Spark reads InputPartition(None) when partitions() gave none
    reads = RangeReads(options, partition)
    try:
        offset = partition.start
        pending: list[Record] = []
        while offset < partition.end:
            try:
                records = reads.fetch(offset)
            except OffsetOutOfRangeError:
                log_start = reads.log_start()
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"offsets {offset}..{min(log_start, partition.end) - 1} were removed by "
                        f"retention before they were read (the log now starts at {log_start}); "
                        'option("failOnDataLoss", "false") skips them'
                    ) from None
                logger.warning(
                    "records_lost_skipped", first_offset=offset, log_start_offset=log_start
                )
                offset = max(offset + 1, log_start)
                continue
            if not records:
                break
            pending += records
            offset = records[-1].offset + 1
            if len(pending) >= ROWS_PER_ARROW_BATCH_MAX:
                yield arrow_batch(pending)
                pending = []
        if pending:
            yield arrow_batch(pending)
    finally:
        reads.close()


def arrow_batch(records: list[Record]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([(r.timestamp_ms or 0) * 1000 for r in records], ARROW_SCHEMA[3].type),
        ],
        schema=ARROW_SCHEMA,
    )


class BatchReader(DataSourceReader):
    def __init__(self, options: Options):
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        options = self.options
        with planning(options) as client:
            log_start = client.start_offset()
            end = client.end_offset(linearizable=True) + 1
            start = _batch_start(options, log_start, end)
            last = end if options.ending == "latest" else options.ending
            if last > end:
                raise ValueError(
                    f"endingOffset {last} is past the end of the log (its next offset is {end})"
                )
            if last < start:
                raise ValueError(f"endingOffset {last} is before the starting offset {start}")
            return planned(options, client, start, last)

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)


def _batch_start(options: Options, log_start: int, end: int) -> int:
    match options.starting:
        case "earliest":
            return log_start
        case "latest":
            return end
        case int(start) if start > end:
            raise ValueError(
                f"startingOffset {start} is past the end of the log (its next offset is {end})"
            )
        case int(start) if start < log_start and options.fail_on_data_loss:
            raise DataLossError(
                f"startingOffset {start} was removed by retention: the log starts at "
                f'{log_start} (option("failOnDataLoss", "false") starts there)'
            )
        case int(start):
            return max(start, log_start)
    raise AssertionError(options.starting)


@contextmanager
def planning(options: Options) -> Iterator[Client]:
    """A leader-routed client for the driver's calls; its errors name the brokers."""
    try:
        with options.client() as client:
            yield client
    except DataLossError:
        raise
    except QuorumLogError as exc:
        raise QuorumLogError(f"quorumlog brokers {','.join(options.brokers)}: {exc}") from exc


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {"offset": NEXT_OFFSET_TO_READ}: one key, so Spark's JSON comparison of
    offsets is exact."""

    def __init__(self, options: Options):
        self.options = options
        self._initial: int | None = None
        self._frozen_end: int | None = None

    def initialOffset(self) -> dict:
        if self._initial is None:  # Spark asks twice; "latest" must not move between
            with planning(self.options) as client:
                match self.options.starting:
                    case "earliest":
                        self._initial = client.start_offset()
                    case "latest":
                        self._initial = client.end_offset(linearizable=True) + 1
                    case int(start):
                        self._initial = start  # past the end: wait for it
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
        with planning(self.options) as client:
            return client.end_offset(linearizable=True) + 1

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        with planning(self.options) as client:
            return planned(self.options, client, start["offset"], end["offset"])

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        pass  # the checkpoint is the consumer's position; the log keeps no cursor


# --- writes ------------------------------------------------------------------------------


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


# --- a local session ---------------------------------------------------------------------

LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %p %c: %m%n
logger.repl.name = org.apache.spark.api.python.PythonGatewayServer
logger.repl.level = error
"""


def local_session(app_name: str, master: str = "local[2]", fast_start: bool = True) -> SparkSession:
    """A quiet local SparkSession with this source registered, for tests, examples and
    benchmarks (../shared/notes/pyspark-datasource.md has the why of each setting). Workers
    run this interpreter, which has quorumlog installed. `fast_start` stops the JVM's JIT
    at its first tier: about 1 s less to start, slower on long jobs."""
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    fd, log4j = tempfile.mkstemp(prefix="quorumlog-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as f:
        f.write(LOG4J)
    try:
        session = _build(app_name, master, log4j, fast_start)
    finally:
        os.unlink(log4j)  # read once, when the JVM starts
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(QuorumLogDataSource)
    return session


def _build(app_name: str, master: str, log4j: str, fast_start: bool) -> SparkSession:
    jit = " -XX:TieredStopAtLevel=1" if fast_start else ""
    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{log4j} -XX:+UseSerialGC{jit}",
        )
        .getOrCreate()
    )
