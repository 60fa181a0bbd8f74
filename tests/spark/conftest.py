"""A local SparkSession for the whole test session, set up to start fast and quietly."""

from __future__ import annotations

import os
import sys

import pytest

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
