"""Bad options fail with a message that names the option and what it takes."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from quorumlog.spark import Options


def test_options_are_parsed_and_defaulted(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    options = Options.parse(
        {
            "brokers": " 127.0.0.1:7001, host-2:7002 ",
            "startingOffset": "17",
            "endingOffset": "LATEST",
            "maxRecordsPerTrigger": "500",
            "recordsPerPartition": "1000",
            "failOnDataLoss": "False",
            "timeout": "2.5",
            "secretFile": str(secret),
        }
    )
    assert options == Options(
        brokers=("127.0.0.1:7001", "host-2:7002"),
        secret=b"s3cret",
        timeout_s=2.5,
        starting=17,
        ending="latest",
        max_records_per_trigger=500,
        records_per_partition=1000,
        fail_on_data_loss=False,
    )
    assert Options.parse({"brokers": "h:1"}) == Options(("h:1",))


def test_offsets_may_be_given_per_partition():
    options = Options.parse(
        {
            "brokers": "h:1",
            "topic": " events ",
            "startingOffset": '{"0": 10, "2": -2, "1": -1}',
            "endingOffset": '{"1": -1, "0": 20}',
        }
    )
    assert (options.topic, options.starting, options.ending) == (
        "events",
        {0: 10, 1: "latest", 2: "earliest"},
        {0: 20, 1: "latest"},
    )
    assert [options.starting_at(p) for p in range(4)] == [10, "latest", "earliest", "earliest"]
    assert [options.ending_at(p) for p in range(3)] == [20, "latest", "latest"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, r'needs \.option\("brokers", "HOST:PORT,\.\.\."\)'),
        ({"brokers": " , "}, "needs"),
        ({"brokers": "localhost"}, "option brokers: 'localhost' is not HOST:PORT"),
        ({"brokers": "h:70000"}, "is not HOST:PORT"),
        ({"startingOffset": "-3"}, "option startingOffset must be earliest | latest or an offset"),
        ({"startingOffset": "first"}, "not 'first'"),
        ({"endingOffset": "earliest"}, "option endingOffset must be latest or an offset >= 0"),
        ({"maxRecordsPerTrigger": "0"}, "option maxRecordsPerTrigger must be a positive number"),
        ({"maxRecordsPerTrigger": "1e3"}, "an integer"),
        ({"recordsPerPartition": "many"}, "option recordsPerPartition must be a positive"),
        ({"timeout": "-1"}, "option timeout must be a positive number \\(seconds\\)"),
        ({"timeout": "nan"}, "option timeout"),
        ({"failOnDataLoss": "yes"}, "option failOnDataLoss must be true or false, not 'yes'"),
        ({"secretFile": "/nonexistent/secret"}, "option secretFile: cannot read the secret file"),
        ({"topic": " "}, "option topic must name a topic"),
        ({"startingOffset": '{"a": 1}'}, "option startingOffset must map partitions to offsets"),
        ({"startingOffset": "{}"}, "must map partitions to offsets"),
        ({"startingOffset": '{"0": -3}'}, r"\(-2 earliest, -1 latest\), not"),
        ({"endingOffset": '{"0": -2}'}, r"option endingOffset must map .* \(-1 latest\)"),
        ({"startingOffsets": "earliest"}, "no option 'startingoffsets': use 'startingOffset'"),
        ({"kafka.bootstrap.servers": "h:1"}, "use 'brokers'"),
    ],
)
def test_a_bad_option_is_named(options, message):
    options = {"brokers": "127.0.0.1:7001", **options} if options else options
    with pytest.raises(ValueError, match=message):
        Options.parse(options)


def test_no_brokers_fails_at_load(spark):
    with pytest.raises(Exception, match=r'needs \.option\("brokers"'):
        spark.read.format("quorumlog").load()


def test_unreachable_brokers_fail_within_the_timeout(spark):
    reader = spark.read.format("quorumlog").option("brokers", "127.0.0.1:1").option("timeout", "1")
    with pytest.raises(Exception, match=r"quorumlog brokers 127\.0\.0\.1:1: gave up after 1 s"):
        reader.load().collect()


def test_offsets_outside_the_log_fail_a_batch_read(spark, cluster, filled):
    with cluster.client() as client:
        end = client.end_offset(linearizable=True) + 1

    def read(**options):
        reader = spark.read.format("quorumlog").option("brokers", cluster.brokers)
        for name, value in options.items():
            reader = reader.option(name, str(value))
        return reader.load().collect()

    with pytest.raises(Exception, match=f"startingOffset {end + 5} is past the end of the log"):
        read(startingOffset=end + 5)
    with pytest.raises(Exception, match=f"endingOffset {end + 1} is past the end of the log"):
        read(endingOffset=end + 1)
    with pytest.raises(Exception, match="endingOffset 5 is before the starting offset 10"):
        read(startingOffset=10, endingOffset=5)


def test_a_log_cannot_be_overwritten_and_needs_a_value_column(spark, cluster):
    df = spark.createDataFrame([(b"v", 1)], "value binary, n int")
    writer = df.select("value").write.format("quorumlog").option("brokers", cluster.brokers)
    with pytest.raises(Exception, match="a log is append-only"):
        writer.mode("overwrite").save()
    with pytest.raises(Exception, match="unexpected: \\['n'\\]"):
        df.write.format("quorumlog").option("brokers", cluster.brokers).mode("append").save()
    with pytest.raises(Exception, match="needs a `value` column of type binary or string"):
        df.selectExpr("n as value").write.format("quorumlog").option(
            "brokers", cluster.brokers
        ).mode("append").save()
