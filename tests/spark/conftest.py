"""A local SparkSession and a live cluster for the whole test session, set up to start fast
and quietly."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest

from quorumlog import Record
from quorumlog.localcluster import ProcessCluster
from tests.spark.helpers import committed_from

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


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    pyspark_sql = pytest.importorskip("pyspark.sql")
    log4j = tmp_path_factory.mktemp("spark") / "log4j2.properties"
    log4j.write_text(LOG4J)
    # Workers must run this interpreter (the venv with quorumlog installed), not python3.
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("quorumlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dlog4j2.configurationFile=file:{log4j} -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    import quorumlog.spark

    session.dataSource.register(quorumlog.spark.QuorumLogDataSource)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Three `quorumlog serve` processes; tests only append to it, so they share it."""
    cluster = ProcessCluster(str(tmp_path_factory.mktemp("cluster")))
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        yield cluster
    finally:
        cluster.stop_all()


@dataclass(frozen=True)
class Filled:
    """Records appended to the shared cluster at the start of the session."""

    records: list[Record]  # with their offsets
    start: int  # the first one's offset
    end: int  # one past the last one's


FILL_RECORDS = 100_000


@pytest.fixture(scope="session")
def filled(cluster) -> Filled:
    records = [
        Record(b"value-%06d" % i, key=b"key-%d" % (i % 7) if i % 10 == 0 else None)
        for i in range(FILL_RECORDS)
    ]
    with cluster.client(timeout=30.0) as client:
        first = client.append(records[:50_000])
        client.append(records[50_000:])
    stored = committed_from(cluster, first)
    assert [(r.key, r.value) for r in stored] == [(r.key, r.value) for r in records]
    return Filled(stored, first, stored[-1].offset + 1)
