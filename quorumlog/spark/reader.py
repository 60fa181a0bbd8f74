"""Spark's batch and stream readers: where a read starts and ends in each partition of the
topic, planned on the driver."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from quorumlog.client.client import Client
from quorumlog.spark.options import DataLossError, Options, planning
from quorumlog.spark.ranges import OffsetRange, Placement, planned, read_range, topic_replicas


class BatchReader(DataSourceReader):
    def __init__(self, options: Options):
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        options = self.options
        with planning(options) as client, Placement(options, client, options.topic_name) as where:
            count = len(where.replica_ids)
            options.check_partitions(count)
            spans = {p: _batch_span(options, client, p) for p in range(count)}
            return planned(options, where, spans)

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)


def _batch_span(options: Options, client: Client, partition: int) -> tuple[int, int]:
    """[start, end) of a batch read of one partition, from its leader."""
    topic, name = options.topic_name, options.log_name(partition)
    log_start = client.start_offset(topic, partition)
    end = client.end_offset(linearizable=True, topic=topic, partition=partition) + 1
    start = _batch_start(options, partition, log_start, end)
    ending = options.ending_at(partition)
    last = end if ending == "latest" else ending
    if last > end:
        raise ValueError(
            f"endingOffset {last} is past the end of {name} (its next offset is {end})"
        )
    if last < start:
        raise ValueError(f"endingOffset {last} is before the starting offset {start} of {name}")
    return start, last


def _batch_start(options: Options, partition: int, log_start: int, end: int) -> int:
    name = options.log_name(partition)
    match options.starting_at(partition):
        case "earliest":
            return log_start
        case "latest":
            return end
        case int(start) if start > end:
            raise ValueError(
                f"startingOffset {start} is past the end of {name} (its next offset is {end})"
            )
        case int(start) if start < log_start and options.fail_on_data_loss:
            raise DataLossError(
                f"startingOffset {start} was removed by retention: {name} starts at "
                f'{log_start} (option("failOnDataLoss", "false") starts there)'
            )
        case int(start):
            return max(start, log_start)
    raise AssertionError(options.starting)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are the next offset to read of each partition. Without the `topic` option
    they are {"offset": N}, as before the topics (checkpoints go on); with it, one key per
    partition in partition order, {"0": N0, "1": N1, ...}, as Spark's Kafka source (without
    the topic level). Either way the same numbers give the same JSON text: Spark compares
    offsets as text.

    maxRecordsPerTrigger is one budget for the whole topic, shared out evenly over the
    partitions with something to read; a partition that needs less than its share leaves
    the rest to the others (_capped)."""

    def __init__(self, options: Options):
        self.options = options
        self._initial: dict[int, int] | None = None
        self._frozen_ends: dict[int, int] | None = None

    def initialOffset(self) -> dict:
        if self._initial is None:  # Spark asks twice; "latest" must not move between
            options = self.options
            with planning(options) as client:
                count = len(topic_replicas(client, options.topic_name))
                options.check_partitions(count)
                self._initial = {p: self._initial_at(client, p) for p in range(count)}
        return self._offset(self._initial)

    def _initial_at(self, client: Client, partition: int) -> int:
        topic = self.options.topic_name
        match self.options.starting_at(partition):
            case "earliest":
                return client.start_offset(topic, partition)
            case "latest":
                return client.end_offset(linearizable=True, topic=topic, partition=partition) + 1
            case int(start):
                return start  # past the end: wait for it
        raise AssertionError(self.options.starting)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._frozen_ends = self._ends()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        starts = self._positions(start)
        ends = self._frozen_ends if self._frozen_ends is not None else self._ends()
        ends = {p: max(ends[p], position) for p, position in starts.items()}
        if isinstance(limit, ReadMaxRows):
            ends = _capped(starts, ends, limit.max_rows)
        return self._offset(ends)

    def _ends(self) -> dict[int, int]:
        """One past the last committed offset of each partition, from its leader."""
        topic = self.options.topic_name
        with planning(self.options) as client:
            return {
                p: client.end_offset(linearizable=True, topic=topic, partition=p) + 1
                for p in range(len(topic_replicas(client, topic)))
            }

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        options = self.options
        starts, ends = self._positions(start), self._positions(end)
        with planning(options) as client, Placement(options, client, options.topic_name) as where:
            return planned(options, where, {p: (starts[p], ends[p]) for p in starts})

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        pass  # the checkpoint is the consumer's position; the log keeps no cursor

    def _offset(self, positions: dict[int, int]) -> dict:
        if self.options.topic is None:
            return {"offset": positions[0]}
        return {str(p): positions[p] for p in sorted(positions)}

    def _positions(self, offset: dict) -> dict[int, int]:
        if self.options.topic is None:
            return {0: offset["offset"]}
        return {int(p): position for p, position in offset.items()}


def _capped(starts: dict[int, int], ends: dict[int, int], limit: int) -> dict[int, int]:
    """`ends` moved back so that at most `limit` offsets lie past `starts` in all: equal
    shares, the partitions with the fewest offsets to read served first, each leaving what
    it does not need to those after it."""
    backlog = {p: ends[p] - starts[p] for p in starts}
    order = sorted(backlog, key=lambda p: (backlog[p], p))
    out, left = dict(starts), limit
    for i, p in enumerate(order):
        share = -(-left // (len(order) - i))  # rounded up: the whole limit is given out
        out[p] += min(backlog[p], share)
        left -= min(backlog[p], share)
    return out
