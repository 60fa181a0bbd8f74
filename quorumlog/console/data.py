"""What the console shows, as JSON objects: asked of the cluster through the node's own
client connection, so each is the object the command line prints with `--json`.

The console is a client of the cluster hosted in the node's process: a page about a
partition another node leads is read from that leader, as `quorumlog consume` would.
"""

from __future__ import annotations

import datetime
import json

from quorumlog.client.aclient import AsyncClient
from quorumlog.client.errors import QuorumLogError
from quorumlog.client.partitioner import partition_of_key
from quorumlog.client.protocol import AppendResult, Record
from quorumlog.client.times import parse_time_ms

PAGE_RECORDS = 50  # records on one page of messages
PAGE_RECORDS_MAX = 500
SEARCH_RECORDS_MAX = 10_000  # records one key search reads before it offers to go on
READ_BYTES = 256 * 1024
PAGE_BYTES_MAX = 4 * 1024 * 1024  # values on one page: a page of large records is shorter
PRETTY_CHARS_MAX = 64 * 1024  # longer JSON values are shown as they are
OFFSET_MAX = 2**63 - 1


class NotFound(QuorumLogError):
    """A page about a topic, partition or group that does not exist (404)."""


class BadQuery(QuorumLogError):
    """A query the page cannot take: a bad offset, time or count (400)."""


class ConsoleData:
    def __init__(self, client: AsyncClient):
        self.client = client

    async def cluster(self) -> dict:
        """Every member as `status --json` shows it, with the address of those that did
        not answer, and the cluster's partitions: how many, how many have no leader, how
        many are short of a replica."""
        members = await self.client.status()
        addresses: dict[str, str] = {}
        for m in members:
            addresses.update(m.get("members", {}))
        for m in members:
            m.setdefault("address", addresses.get(str(m["node_id"])))
        # A removed node still running knows only an old configuration: not counted.
        up = [m for m in members if "error" not in m and m.get("role") != "removed"]
        topics = await self.client.topics(details=True)
        partitions = sum(count for count, _ in topics.values())
        controller = next((m["controller_id"] for m in up if m["controller_id"]), None)
        return {
            "members": members,
            "controller_id": controller,
            "topics": len(topics),
            "partitions": partitions,
            # Partitions some reachable member leads; the rest wait for an election.
            "partitions_without_leader": max(
                partitions - sum(m.get("partitions_led", 0) for m in up), 0
            ),
            # A member of an older version does not say: counted as none.
            "partitions_under_replicated": sum(m.get("partitions_under_replicated", 0) for m in up),
        }

    async def topics(self) -> list[dict]:
        """As `topic list --json`."""
        listed = await self.client.topics(details=True)
        return [
            {"topic": name, "partitions": partitions, "replicas": replicas}
            for name, (partitions, replicas) in sorted(listed.items())
        ]

    async def topic(self, name: str) -> list[dict]:
        """As `topic describe --json`: one object per partition."""
        if name not in await self.client.topics():
            raise NotFound(f"unknown topic {name!r}")
        return await self.client.describe_topic(name)

    async def messages(self, name: str, partition_text: str, query: dict[str, str]) -> dict:
        """A page of a partition's records: from `offset`, from the first at or after
        `time`, the `last` N (the default: the last 50), or the page `before` an offset;
        with `key`, only the records of that key, searched forward from there."""
        count = await self._partition_count(name)
        partition = _int(partition_text, "partition", 0, OFFSET_MAX)
        if partition >= count:
            raise NotFound(f"{name} has partitions 0 to {count - 1}, not {partition}")
        limit = _int(query.get("limit") or PAGE_RECORDS, "limit", 1, PAGE_RECORDS_MAX)
        start = await self.client.start_offset(name, partition)
        end = await self.client.end_offset(topic=name, partition=partition)
        position = await self._first_offset(name, partition, query, start, end, limit)
        key = query.get("key")
        records, next_offset, scanned = await self._read(
            name, partition, position, limit, key.encode() if key else None
        )
        return {
            "topic": name,
            "partition": partition,
            "log_start_offset": start,
            "commit_offset": end,
            "from_offset": position,
            "next_offset": next_offset,
            "key": key,
            # Where Kafka's default partitioner (every client's) puts records of this key.
            "key_partition": None if key is None else partition_of_key(key.encode(), count),
            "limit": limit,
            "scanned": scanned,
            "records": [record_json(r) for r in records],
        }

    async def _first_offset(
        self, name: str, partition: int, query: dict, start: int, end: int, limit: int
    ) -> int:
        if query.get("offset"):
            return max(_int(query["offset"], "offset", 0, OFFSET_MAX), start)
        if query.get("time"):
            try:
                ms = parse_time_ms(query["time"])
            except ValueError as exc:
                raise BadQuery(str(exc)) from None
            found = await self.client.offset_for_time(ms, name, partition)
            return end + 1 if found is None else found
        if query.get("key"):
            return start  # a search starts at the beginning unless told where
        if query.get("before"):  # the page before one shown (its "Older" link)
            before = _int(query["before"], "before", 0, OFFSET_MAX)
            return await self._back_from(name, partition, min(before, end + 1), limit, start)
        last = _int(query.get("last") or limit, "last", 1, PAGE_RECORDS_MAX)
        return await self._back_from(name, partition, end + 1, last, start)

    async def _back_from(
        self, name: str, partition: int, before: int, count: int, start: int
    ) -> int:
        """Where the last `count` records below offset `before` start: `before - count`,
        unless the offsets have holes (a compacted topic's), which a window doubling on
        each try widens over."""
        width = count
        while True:
            position = max(before - width, start)
            offsets = await self._offsets_between(name, partition, position, before)
            if len(offsets) >= count:
                return offsets[-count]
            if position == start:
                return start
            width *= 2

    async def _offsets_between(self, name: str, partition: int, low: int, high: int) -> list[int]:
        """The offsets of the records in [low, high)."""
        out: list[int] = []
        while low < high:
            records, after = await self.client.read_on(
                low, min(high - low, 1000), name, partition, READ_BYTES
            )
            out += [r.offset for r in records if r.offset < high]
            if after == low:
                break  # the end
            low = after
        return out

    async def _read(
        self, name: str, partition: int, position: int, limit: int, key: bytes | None
    ) -> tuple[list[Record], int, int]:
        """Up to `limit` records from `position` (of `key` only, if given: reading at most
        SEARCH_RECORDS_MAX); the offset to read on from, and how many records were read."""
        found: list[Record] = []
        scanned = size = 0
        while (
            len(found) < limit
            and scanned < (SEARCH_RECORDS_MAX if key else limit)
            and size < PAGE_BYTES_MAX
        ):
            want = limit - len(found) if key is None else min(1000, SEARCH_RECORDS_MAX - scanned)
            records, position_after = await self.client.read_on(
                position, want, name, partition, READ_BYTES
            )
            if position_after == position:
                break  # the end
            position = position_after
            scanned += len(records)
            matched = records if key is None else [r for r in records if r.key == key]
            room = limit - len(found)
            if len(matched) > room:  # a search read past its page: go on after the last shown
                position = matched[room].offset
            found += matched[:room]
            size += sum(len(r.value or b"") for r in matched[:room])
        return found, position, scanned

    async def key_partition(self, name: str, key: str) -> int:
        """The partition records of `key` go to unless their producer chose another."""
        return partition_of_key(key.encode(), await self._partition_count(name))

    async def _partition_count(self, name: str) -> int:
        topics = await self.client.topics()
        if name not in topics:
            raise NotFound(f"unknown topic {name!r}")
        return topics[name]

    async def groups(self) -> list[dict]:
        """As `group list --json`."""
        return await self.client.groups()

    async def group(self, name: str) -> dict:
        """As `group describe --json` (each partition's "end" its last offset, with
        "next_offset" Kafka's end), with the lag of every partition summed."""
        if name not in {g["group"] for g in await self.client.groups()}:
            raise NotFound(f"unknown group {name!r}")
        described = await self.client.describe_group(name)
        described["lag"] = sum(row["lag"] or 0 for row in described["partitions"])
        return described

    async def produce(self, name: str, form: dict[str, str]) -> dict:
        """One record from the topic page's form: value, optional key and partition."""
        count = await self._partition_count(name)
        key = form.get("key") or None
        partition_text = form.get("partition", "").strip()
        value = form.get("value", "").encode()
        record = Record(value, key.encode() if key else None)
        partition = _int(partition_text, "partition", 0, count - 1) if partition_text else None
        result = await self.client.append([record], details=True, topic=name, partition=partition)
        assert isinstance(result, AppendResult)
        return {"topic": name, "partition": result.partition, "offset": result.first_offset}


def record_json(r: Record) -> dict:
    """A record for the page and `/api/`: key, value and headers as text where they are
    UTF-8 (a value that is JSON, pretty-printed in `value_pretty`), else as hex."""
    out = {"offset": r.offset, "timestamp_ms": r.timestamp_ms, "timestamp": _iso(r.timestamp_ms)}
    out.update(_bytes_json("key", r.key))
    out.update(_bytes_json("value", r.value))
    out["headers"] = [{"name": n, **_bytes_json("value", v)} for n, v in r.headers or ()]
    if out["value_encoding"] == "utf-8":
        pretty = _pretty_json(out["value"])
        if pretty is not None:
            out["value_pretty"] = pretty
    return out


def _bytes_json(name: str, data: bytes | None) -> dict:
    if data is None:
        return {name: None, f"{name}_encoding": None}
    try:
        return {name: data.decode("utf-8"), f"{name}_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {name: data.hex(), f"{name}_encoding": "hex"}


def _pretty_json(text: str) -> str | None:
    if len(text) > PRETTY_CHARS_MAX or not text.lstrip().startswith(("{", "[")):
        return None  # too long to be read, or already as plain as it gets
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):  # not JSON, or nested past what is worth showing
        return None


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    try:
        instant = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (ValueError, OverflowError, OSError):
        return None  # a producer's clock far outside what a calendar shows
    return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _int(text: str | int, name: str, low: int, high: int) -> int:
    text = str(text).strip()
    if len(text) > 20 or not text.lstrip("-").isdigit():
        raise BadQuery(f"{name} is a number, not {text[:40]!r}")
    value = int(text)
    if not low <= value <= high:
        raise BadQuery(f"{name} is from {low} to {high}, not {value}")
    return value
