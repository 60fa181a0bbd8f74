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

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from quorumlog.spark.options import DataLossError, Options
from quorumlog.spark.ranges import SCHEMA, OffsetRange, read_range, split
from quorumlog.spark.reader import BatchReader, StreamReader
from quorumlog.spark.session import local_session
from quorumlog.spark.writer import StreamWriter, Writer, _writable, producer_id, write_rows

__all__ = [
    "DataLossError",
    "OffsetRange",
    "Options",
    "QuorumLogDataSource",
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
