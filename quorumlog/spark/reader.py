"""Spark's batch and stream readers: where a read starts and ends, planned on the driver."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from quorumlog.client import Client
from quorumlog.errors import QuorumLogError
from quorumlog.spark.options import DataLossError, Options
from quorumlog.spark.ranges import OffsetRange, planned, read_range


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
