"""`consume` without a group: where each partition starts, and one read loop over one
partition or every partition of a topic (`--partition all`).

Each partition is read in offset order; partitions are read in turn, each read taking what
one read carries, so what is printed is merged by arrival, never sorted across partitions
(as kcat and `rpk topic consume` print several partitions).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import click

from quorumlog.client.client import Client
from quorumlog.client.errors import OffsetOutOfRangeError, QuorumLogError, UnknownTopicError
from quorumlog.client.protocol import Record

ALL_PARTITIONS = "all"
# As many as one read carries (1 MiB): asked for fewer, each read fetched and decoded a whole
# megabyte again for a thousand small records (quadratic).
READ_RECORDS = 1_000_000
FOLLOW_POLL_S = 0.2


class PartitionChoice(click.ParamType):
    """A partition number, or `all`."""

    name = "P|all"

    def convert(self, value, param, ctx):
        if value == ALL_PARTITIONS or isinstance(value, int):
            return value
        try:
            number = int(value)
        except ValueError:
            number = -1
        if number < 0:
            self.fail(f"{value!r} is neither a partition (0, 1, ...) nor 'all'", param, ctx)
        return number


def partition_count(client: Client, topic: str) -> int:
    count = client.topics().get(topic)
    if count is None:
        raise UnknownTopicError(f"unknown topic {topic!r}")
    return count


def note_other_partitions(client: Client, topic: str) -> None:
    """No --partition on a topic of several: say on stderr that only partition 0 is read
    (stdout stays what it always was). Only a note: a failure to ask is not the command's."""
    try:
        count = client.topics().get(topic)
    except QuorumLogError:
        return
    if count is not None and count > 1:
        click.echo(f"reading partition 0 of {count} (--partition all reads every one)", err=True)


def parse_start(start: str) -> str | int:
    """--from: earliest, latest or an offset (at or above 0), checked before any call."""
    if start in ("earliest", "latest"):
        return start
    try:
        offset = int(start)
    except ValueError:
        raise click.UsageError(
            f"--from takes earliest, latest or an offset, not {start!r}"
        ) from None
    if offset < 0:
        raise OffsetOutOfRangeError(f"offset {offset} is negative")
    return offset


def start_offsets(
    client: Client, topic: str, partitions: list[int], start: str | int, from_time: int | None
) -> dict[int, int]:
    """partition -> the first offset to read: --from earliest|latest|OFFSET (`parse_start`;
    the same offset in each partition) or --from-time."""
    if from_time is not None:
        return {p: _time_offset(client, from_time, topic, p) for p in partitions}
    if start == "earliest":
        return {p: client.start_offset(topic=topic, partition=p) for p in partitions}
    if start == "latest":
        return {p: client.end_offset(topic=topic, partition=p) + 1 for p in partitions}
    assert isinstance(start, int), start
    return dict.fromkeys(partitions, start)


def _time_offset(client: Client, from_time: int, topic: str, partition: int) -> int:
    """The first offset stamped at or after `from_time`; past the end, the end (the end is
    asked first: a record committed between the two calls is then not skipped)."""
    end = client.end_offset(topic=topic, partition=partition)
    found = client.offset_for_time(from_time, topic=topic, partition=partition)
    return end + 1 if found is None else found


def read_batches(
    client: Client,
    topic: str,
    positions: dict[int, int],
    max_records: int | None,
    follow: bool,
) -> Iterator[list[Record]]:
    """Committed records of every partition in `positions` (partition -> next offset, moved
    on as records are yielded), at most `max_records` in all. Without `follow`, stops once
    a round of reads finds nothing new in any partition."""
    remaining = max_records
    while remaining is None or remaining > 0:
        found = False
        for partition, offset in positions.items():
            want = READ_RECORDS if remaining is None else min(READ_RECORDS, remaining)
            records = client.read(offset, want, topic=topic, partition=partition)
            if not records:
                continue
            found = True
            positions[partition] = records[-1].offset + 1
            yield records
            if remaining is not None:
                remaining -= len(records)
                if remaining <= 0:
                    return
        if not found:
            if not follow:
                return
            time.sleep(FOLLOW_POLL_S)


def say_if_past_the_end(client: Client, topic: str, positions: dict[int, int]) -> None:
    """Nothing printed from an offset past the next one: say where the log ends (it is
    not an error: --follow would wait there)."""
    past = []
    for partition, offset in positions.items():
        end = client.end_offset(topic=topic, partition=partition)
        if offset > end + 1:
            past.append((partition, end, offset))
    if len(past) == 1 and len(positions) == 1:
        ((partition, end, offset),) = past
        click.echo(
            f"{topic}/{partition} ends at offset {end}: nothing at {offset} "
            "yet (--follow waits for it)",
            err=True,
        )
    elif past:
        ends = ", ".join(f"{topic}/{p} at {end}" for p, end, _ in past)
        click.echo(f"nothing at offset {past[0][2]} yet: {ends} (--follow waits for it)", err=True)
