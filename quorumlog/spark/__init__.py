"""The Spark data source: read a topic as a batch or a stream, write DataFrames to it.

    spark.dataSource.register(QuorumLogDataSource)
    spark.read.format("quorumlog").option("brokers", "127.0.0.1:7001").load()
    spark.readStream.format("quorumlog").option("brokers", ...).option("topic", "events").load()
    df.write.format("quorumlog").option("brokers", ...).mode("append").save()

Columns: offset long, key binary, value binary, timestamp timestamp; with the `topic` option,
also partition int (as Spark's Kafka source has topic and partition columns; the offset is
the record's offset in its partition). Without the option the source reads and writes the
default topic's one log exactly as it did before topics existed: same columns, same stream
offsets, same producer ids; `topic` "default" reads that log the topic way (a partition
column, offsets per partition). Options (values are strings, as Spark passes them):

- `brokers` HOST:PORT,...: any members; the others are found through them.
- `topic` NAME: the topic to read or write, every partition of it. An unknown topic fails
  at the first call (planning a read, `save()`), saying so.
- `startingOffset` earliest | latest | N (default earliest): the first offset to read, in
  every partition; or per partition, as Kafka's JSON without the topic level:
  {"0": 10, "1": -2} (-2 earliest, -1 latest; a partition left out: earliest).
- `endingOffset` latest | N, or {"0": 10, "1": -1} (batch reads, default latest): one past
  the last offset to read.
- `maxRecordsPerTrigger` N (streams): offsets per micro-batch over the whole topic; none by
  default.
- `recordsPerPartition` N (default 50,000): offsets per Spark partition.
- `failOnDataLoss` true | false (default true): what to do when records were removed by
  retention before they were read: fail, or skip to the log start (Spark's Kafka source).
- `secretFile` PATH, `timeout` SECONDS (default 30, per call to the cluster).
- `tlsCa`, `tlsCert`, `tlsKey` PATH: TLS with nodes started with `--tls-ca` (the files at the
  same paths on the driver and every worker).

Reads. Only committed records are read, so a range read twice gives the same rows (Spark
replays a micro-batch after a restart). Each partition of the topic is its own Raft group:
its start and end come from its leader, and its offsets are cut into Spark partitions of
`recordsPerPartition` offsets, so that 100,000 records are two tasks and local[2] reads in
parallel (and so are the topic's partitions), while a task still reads tens of megabytes,
far more than it costs to start. Each Spark partition reads from one replica of its
partition that had the range committed when the read was planned, the i-th range of
partition p from the (p + i)-th of them, so that the tasks spread over the nodes; a replica
that fails or is behind hands over to the next. Rows go to Spark as Arrow record batches
(about 3x faster than tuples).

Streams. A stream's offset is the next offset to read of each partition: {"offset": N}
without the `topic` option (so existing checkpoints go on), {"0": N0, "1": N1, ...} with it.
maxRecordsPerTrigger is shared out evenly over the partitions that have records to read, a
partition with fewer leaving the rest of its share to the others (reader._capped).

Writes: each row goes to the partition of the topic that its `partition` column names
(with the `topic` option; a read of a topic has that column), else to the one its key
hashes to with the client's partitioner (Kafka's murmur2, so a keyed row lands where
`Client.append` puts that key), else round robin, row by row, from a partition that
depends on the task. A retried task does not write twice. Every task appends with
acks=quorum under producer ids derived from the write (an id made on the driver; for
streams, the query's id, which the checkpoint keeps, and the micro-batch), the Spark
partition and, with the `topic` option, the topic's partition (each has its own producer
table), with sequence numbers counted from 0 and one batch per append: a retry, or a
micro-batch replayed after a restart, sends the same rows to the same partitions as the
same (producer id, sequence) pairs, and each leader answers them with the first run's
offsets instead of writing again. That assumes the retry has the same rows in the same
order (a deterministic input, as Spark's own recomputation does); where it does not, the
first run's appends stand for the sequence numbers both sent. A producer id covers
APPENDS_PER_PRODUCER appends, well inside the APPENDS_PER_PRODUCER_MAX each node remembers
per producer (raft/producers.py); nodes forget the least recently used of their 100,000
producers, or any idle for a day, so a retry after that may write again. Each task's
commit message carries its count and first and last offsets: one `Appended`, or with the
`topic` option a `Written` with one per partition.

Needs pyspark >= 4.2 (admission control and Trigger.AvailableNow) and pyarrow.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from quorumlog.spark.options import DataLossError, Options
from quorumlog.spark.ranges import SCHEMA, TOPIC_SCHEMA, OffsetRange, read_range, split
from quorumlog.spark.reader import BatchReader, StreamReader
from quorumlog.spark.session import local_session
from quorumlog.spark.writer import (
    Appended,
    StreamWriter,
    Writer,
    Written,
    _writable,
    producer_id,
    write_rows,
)

__all__ = [
    "Appended",
    "DataLossError",
    "OffsetRange",
    "Options",
    "QuorumLogDataSource",
    "Written",
    "local_session",
    "producer_id",
    "read_range",
    "split",
    "write_rows",
]


class QuorumLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "quorumlog"

    def schema(self) -> str:
        # Bad options fail at load(), not at the first action.
        return SCHEMA if Options.parse(self.options).topic is None else TOPIC_SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return BatchReader(Options.parse(self.options))

    def streamReader(self, schema) -> DataSourceStreamReader:
        return StreamReader(Options.parse(self.options))

    def writer(self, schema, overwrite: bool) -> DataSourceWriter:
        return Writer(_writable(Options.parse(self.options), schema, overwrite))

    def streamWriter(self, schema, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(_writable(Options.parse(self.options), schema, overwrite))
