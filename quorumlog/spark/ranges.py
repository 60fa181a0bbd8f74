"""Offset ranges: a read cut into Spark partitions, each placed on the replicas that had it
committed, and one range read from them as Arrow batches (on the workers)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import structlog
from pyspark.sql.datasource import InputPartition

from quorumlog.client import Client
from quorumlog.errors import OffsetOutOfRangeError, QuorumLogError
from quorumlog.protocol import Record, members_of
from quorumlog.spark.options import DataLossError, Options

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
ROWS_PER_ARROW_BATCH_MAX = 10_000
RETRY_PAUSE_S = 0.1


logger = structlog.get_logger("quorumlog.spark")


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
