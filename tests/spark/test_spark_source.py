"""A local Spark reading and writing a live cluster: batch, stream, and back."""

from __future__ import annotations

from quorumlog import Record
from quorumlog.localcluster import ProcessCluster


def test_batch_read_write_and_stream(spark, tmp_path):
    (tmp_path / "c").mkdir()
    cluster = ProcessCluster(str(tmp_path / "c"))
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        with cluster.client() as c:
            first = c.append([b"r%03d" % i for i in range(150)])
            c.append([Record(b"keyed-%d" % i, key=b"k%d" % i) for i in range(3)])
        brokers = cluster.brokers

        df = spark.read.format("quorumlog").option("brokers", brokers).load()
        assert df.schema.simpleString() == (
            "struct<offset:bigint,key:binary,value:binary,timestamp:timestamp>"
        )
        rows = df.orderBy("offset").collect()
        assert [bytes(r.value) for r in rows[:150]] == [b"r%03d" % i for i in range(150)]
        assert rows[0].offset == first and rows[0].key is None
        assert [bytes(r.key) for r in rows[150:]] == [b"k0", b"k1", b"k2"]
        assert len({r.offset for r in rows}) == len(rows) == 153

        bounded = (
            spark.read.format("quorumlog")
            .option("brokers", brokers)
            .option("startingOffset", str(first + 10))
            .option("endingOffset", str(first + 20))
            .load()
            .collect()
        )
        assert sorted(r.offset for r in bounded) == list(range(first + 10, first + 20))

        out = spark.createDataFrame([(b"from-spark-%d" % i,) for i in range(40)], "value binary")
        out.write.format("quorumlog").option("brokers", brokers).mode("append").save()
        with cluster.client() as c:
            values = {r.value for r in c.read(0, 1000)}
        assert {b"from-spark-%d" % i for i in range(40)} <= values

        checkpoint = str(tmp_path / "checkpoint")
        sink = str(tmp_path / "sink")

        def run_stream() -> None:
            query = (
                spark.readStream.format("quorumlog")
                .option("brokers", brokers)
                .option("maxRecordsPerTrigger", "50")
                .load()
                .writeStream.format("parquet")
                .option("path", sink)
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(120)

        run_stream()
        with cluster.client() as c:
            c.append([b"late-%d" % i for i in range(30)])
        run_stream()
        streamed = spark.read.parquet(sink).collect()
        offsets = [r.offset for r in streamed]
        assert len(offsets) == len(set(offsets)), "no record twice across restarts"
        assert len(offsets) == 153 + 40 + 30, "every record once"
    finally:
        cluster.stop_all()
