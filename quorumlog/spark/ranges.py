"""Offset ranges: a read cut into Spark partitions, each placed on the replicas that had it
committed, and one range read from them as Arrow batches (on the workers)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import structlog
from pyspark.sql.datasource import InputPartition

from quorumlog.client.client import Client
from quorumlog.client.errors import OffsetOutOfRangeError, QuorumLogError
from quorumlog.client.protocol import DEFAULT_TOPIC, Record, members_of
from quorumlog.spark.options import DataLossError, Options

SCHEMA = "offset long, key binary, value binary, timestamp timestamp"
TOPIC_SCHEMA = f"{SCHEMA}, partition int"  # with the `topic` option
# As Spark converts SCHEMA (it checks batches against it, nullability included).
ARROW_SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
ARROW_TOPIC_SCHEMA = ARROW_SCHEMA.append(pa.field("partition", pa.int32()))
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
    topic: str = DEFAULT_TOPIC
    partition: int = 0


def split(
    start: int,
    end: int,
    per_partition: int,
    ready: Sequence[str],
    behind: Sequence[str] = (),
    topic: str = DEFAULT_TOPIC,
    partition: int = 0,
) -> list[OffsetRange]:
    """[start, end) of one partition of `topic` in ranges of `per_partition` offsets, the
    i-th one reading from the (partition + i)-th ready replica first (round robin, so that
    the first ranges of partitions spread over the nodes too), then from the other ready
    ones, then the others."""
    out = []
    for i, s in enumerate(range(start, end, per_partition)):
        turn = (partition + i) % len(ready) if ready else 0
        replicas = (*ready[turn:], *ready[:turn], *behind)
        out.append(OffsetRange(s, min(end, s + per_partition), replicas, topic, partition))
    return out


def topic_replicas(client: Client, topic: str) -> list[tuple[int, ...]]:
    """The node ids of each partition's replicas, by partition; raises UnknownTopicError for
    no such topic. The default topic's one partition is on every member: () asks nothing."""
    if topic == DEFAULT_TOPIC:
        return [()]
    described = sorted(client.describe_topic(topic), key=lambda p: p["partition"])
    return [tuple(p["replicas"]) for p in described]


class Placement:
    """Where the partitions of a topic can be read: each one's replicas that answer, asked
    directly for the commit offset they know (a follower learns it after the leader, or,
    on a quiet partition, at its next append). One per planning: it keeps a client per
    node, and asks a node that failed nothing more."""

    def __init__(self, options: Options, client: Client, topic: str):
        self.topic = topic
        self._options = options
        self._client = client
        self._clients: dict[str, Client] = {}

    def __enter__(self) -> Placement:
        return self

    def __exit__(self, *exc) -> None:
        for client in self._clients.values():
            client.close()

    @cached_property
    def replica_ids(self) -> list[tuple[int, ...]]:
        return topic_replicas(self._client, self.topic)

    @cached_property
    def _members(self) -> dict[int, str]:
        """node id -> address of the members that answer; none if no member list can be
        had."""
        try:
            statuses = self._client.status()
        except QuorumLogError:
            return {}
        addresses: dict[int, str] = {}
        for status in statuses:
            addresses.update(members_of(status))
        answered = (s["node_id"] for s in statuses if "commit_offset" in s)  # not "unreachable"
        return {n: addresses[n] for n in sorted(answered) if n in addresses}

    def replicas_with(self, partition: int, last_offset: int) -> tuple[list[str], list[str]]:
        """Addresses of the partition's replicas that answer: those that have committed
        `last_offset`, and the others, in node id order."""
        ids = self.replica_ids[partition] or self._members
        ready, behind = [], []
        for node_id in sorted(ids):
            commit = self._commit_offset(node_id, partition)
            if commit is not None:
                address = self._members[node_id]
                (ready if commit >= last_offset else behind).append(address)
        return ready, behind

    def _commit_offset(self, node_id: int, partition: int) -> int | None:
        address = self._members.get(node_id)
        if address is None:
            return None
        if address not in self._clients:
            self._clients[address] = self._options.replica_client(address)
        try:
            return self._clients[address].end_offset(topic=self.topic, partition=partition)
        except QuorumLogError:
            del self._members[node_id]
            return None


def planned(
    options: Options, placement: Placement, spans: dict[int, tuple[int, int]]
) -> list[OffsetRange]:
    """Ranges of each partition's [start, end) offsets, placed on its replicas; one empty
    range when there is nothing to read."""
    ranges = []
    for partition, (start, end) in spans.items():
        if start < end:
            ready, behind = placement.replicas_with(partition, end - 1)
            per_partition = options.records_per_partition
            ranges += split(start, end, per_partition, ready, behind, placement.topic, partition)
    return ranges or [OffsetRange(0, 0)]


class RangeReads:
    """Reads of one offset range from the partition's replicas, each asked directly: the
    first that serves the range keeps serving it; on an error the next takes over.

    A node serves reads up to the commit offset it knows, so an empty answer below the
    range's end means "this node is behind" unless the node has committed the whole range
    (then no data records are left: control batches occupy offsets and are skipped). The
    range was committed when it was planned, so some replica has it, or had it.
    """

    def __init__(self, options: Options, span: OffsetRange):
        self._options = options
        self._end = span.end
        self._topic, self._partition = span.topic, span.partition
        self._sources = list(span.replicas or options.brokers)
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
                    records = client.read(
                        offset, ROWS_PER_ARROW_BATCH_MAX, self._topic, self._partition
                    )
                    answered += 1
                    if records or self._end_offset(client) >= self._end - 1:
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

    def _end_offset(self, client: Client) -> int:
        return client.end_offset(topic=self._topic, partition=self._partition)

    def _rediscover(self) -> None:
        options = self._options
        try:
            with options.client() as client, Placement(options, client, self._topic) as placement:
                ready, behind = placement.replicas_with(self._partition, self._end - 1)
        except QuorumLogError:
            return  # no replica list to be had: ask the same nodes again
        if ready or behind:
            self._sources, self._turn = ready + behind, 0

    def log_start(self) -> int:
        """The lowest log start of the replicas that answer (where reading can go on)."""
        starts = []
        for address in self._sources:
            try:
                starts.append(self._client(address).start_offset(self._topic, self._partition))
            except QuorumLogError:
                continue
        if not starts:
            raise QuorumLogError(f"no node of {','.join(self._sources)} answered")
        return min(starts)


def read_range(options: Options, span: OffsetRange | None) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the committed records in [start, end) of the range's partition;
    deterministic for a range.

    Records that retention removed before they were read fail the read (DataLossError) or,
    with failOnDataLoss=false, are skipped.
    """
    if span is None or span.start >= span.end:
        return  # Spark reads InputPartition(None) when partitions() gave none
    # The partition column is there with the `topic` option only (TOPIC_SCHEMA).
    partition = None if options.topic is None else span.partition
    reads = RangeReads(options, span)
    try:
        offset = span.start
        pending: list[Record] = []
        while offset < span.end:
            try:
                records = reads.fetch(offset)
            except OffsetOutOfRangeError:
                log_start = reads.log_start()
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"offsets {offset}..{min(log_start, span.end) - 1} were removed by "
                        f"retention before they were read ({options.log_name(span.partition)} "
                        f'now starts at {log_start}); option("failOnDataLoss", "false") skips '
                        "them"
                    ) from None
                logger.warning(
                    "records_lost_skipped",
                    topic=span.topic,
                    partition=span.partition,
                    first_offset=offset,
                    log_start_offset=log_start,
                )
                offset = max(offset + 1, log_start)
                continue
            if not records:
                break
            pending += records
            offset = records[-1].offset + 1
            if len(pending) >= ROWS_PER_ARROW_BATCH_MAX:
                yield arrow_batch(pending, partition)
                pending = []
        if pending:
            yield arrow_batch(pending, partition)
    finally:
        reads.close()


def arrow_batch(records: list[Record], partition: int | None = None) -> pa.RecordBatch:
    """Records as rows of SCHEMA, or of TOPIC_SCHEMA when `partition` is given."""
    columns = [
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([(r.timestamp_ms or 0) * 1000 for r in records], ARROW_SCHEMA[3].type),
    ]
    if partition is None:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    columns.append(pa.array([partition] * len(records), pa.int32()))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_TOPIC_SCHEMA)
