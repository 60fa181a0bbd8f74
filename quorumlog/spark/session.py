"""A quiet local SparkSession with the data source registered."""

from __future__ import annotations

import os
import sys
import tempfile

from pyspark.sql import SparkSession

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
    benchmarks (each setting says why below). Workers run this interpreter, which has quorumlog installed. `fast_start` stops the JVM's JIT
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
    from quorumlog.spark import QuorumLogDataSource  # the package imports this module

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
