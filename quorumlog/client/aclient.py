"""`AsyncClient`: the trio client, the same calls as `Client` as coroutines.

One instance may be shared by many tasks: requests are pipelined on one connection per
broker, which is how a window of appends stays in flight. Use it as
`async with AsyncClient(brokers) as c:`; every call ends within the client's timeout.
"""

from __future__ import annotations

import copy
import enum
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import outcome
import sniffio
import trio

from quorumlog.client.batcher import Batcher
from quorumlog.client.connections import BrokerConnections
from quorumlog.client.deadline import Deadline, problem
from quorumlog.client.errors import (
    OffsetOutOfRangeError,
    QuorumLogError,
    UnknownTopicError,
    UnreachableError,
)
from quorumlog.client.leader_watch import LeaderWatch
from quorumlog.client.protocol import (
    ADMIN_ANSWER_MARGIN_S,
    DEFAULT_TOPIC,
    READ_BYTES_MAX,
    STATUS_TIMEOUT_S,
    WATCHED,
    Acks,
    AppendResult,
    ClientBase,
    Prepared,
    Record,
    admin_retry,
    append_result,
    batches_of,
    decode_batches,
    members_of,
    newest_status,
    parse_acks,
    prepare,
    record_list,
    split,
    status_rows,
)
from quorumlog.client.routing import route_of
from quorumlog.client.topic_calls import TopicCalls
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import (
    AdminReply,
    AdminRequest,
    AppendReply,
    EndOffsetReply,
    EndOffsetRequest,
    ErrorCode,
    ErrorReply,
    GroupRequest,
    Message,
    OffsetForTimeReply,
    OffsetForTimeRequest,
    ReadReply,
    ReadRequest,
    StatusReply,
    StatusRequest,
)


class Life(enum.Enum):
    """Where an `async with` object is in its life: calls are made only while it is OPEN."""

    NEW = "new"  # made, not entered yet
    OPEN = "open"  # inside its `async with` block
    CLOSED = "closed"  # its block has ended


def check_open(life: Life, what: str) -> None:
    """A RuntimeError that says how to use `what`, unless it is open."""
    if life is Life.NEW:
        raise RuntimeError(
            f"the {what} is not open: use it as `async with {what}(...) as c:` "
            "and make calls inside the block"
        )
    if life is Life.CLOSED:
        raise RuntimeError(
            f"the {what} is closed: its `async with` block has ended "
            f"(make calls inside `async with {what}(...) as c:`)"
        )


class AsyncClient(TopicCalls, ClientBase):
    def __init__(
        self,
        brokers: str | Sequence[str],
        secret: bytes | str | None = None,
        timeout: float = 10.0,
        direct: bool = False,
        producer_id: int | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ):
        super().__init__(brokers, secret, timeout, direct, producer_id, tls_ca, tls_cert, tls_key)
        self._batcher = Batcher()
        self._connections = BrokerConnections(self.secret, self._ssl_context)
        self._nursery: trio.Nursery | None = None
        self._nursery_manager = None
        self._life = Life.NEW
        self._leader_watch = LeaderWatch(self.brokers, self._connections.request)
        # Per (topic, partition): where the last `read` ended, and the reply's batches it
        # did not return.
        self._unread: dict[tuple[str, int], Unread] = {}

    async def __aenter__(self) -> AsyncClient:
        library = sniffio.current_async_library()
        if library != "trio":  # say so now, not with an error from deep inside trio
            raise RuntimeError(
                f"AsyncClient runs on trio, not {library}: from {library} code use the "
                "blocking quorumlog.Client (in a thread, e.g. asyncio.to_thread), which "
                "works anywhere"
            )
        if self._life is Life.OPEN:
            raise RuntimeError("the AsyncClient is open already: enter it once")
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        self._connections.nursery = self._nursery
        if not self._router.direct:
            self._nursery.start_soon(self._leader_watch.run)
        self._life = Life.OPEN
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool | None:
        assert self._nursery is not None and self._nursery_manager is not None
        self._life = Life.CLOSED
        self._nursery.cancel_scope.cancel()
        try:
            return await self._nursery_manager.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The connection tasks end quietly when cancelled, so a group holding only the
            # body's own error is that error: raise it as `async with` users expect
            # (`except QuorumLogError` around the block), not wrapped in a group.
            if exc is not None and group.exceptions == (exc,):
                raise exc from None
            raise

    async def append(
        self,
        records: Iterable[bytes | Record],
        acks: str = "quorum",
        details: bool = False,
        topic: str = DEFAULT_TOPIC,
        partition: int | None = None,
    ) -> int | AppendResult | None:
        """Append `records` as one batch to one partition of `topic`: `partition`, or (None)
        the partition of the first record's key, or, unkeyed, the next partition in turn:
        round robin per call (one call, one partition; `append_spread` spreads the records
        of one call). Returns the offset of the first record (None with acks="none"; an
        `AppendResult` with details). `acks`: "quorum" (or Kafka's "all"), "leader", "none"."""
        check_open(self._life, "AsyncClient")
        records = record_list(records)
        prepared = prepare(records)
        level = parse_acks(acks)
        deadline = partial(Deadline, self.timeout, trio.current_time() + self.timeout)
        if partition is None:
            count = await self._count_within(topic, deadline)
            partition = self._partition_for(topic, records, count)
        send = partial(self._send_append, level, topic, partition)
        replies = await self._batcher.append((topic, partition, level), prepared, send, deadline)
        return append_result(replies, details, topic, partition)

    async def append_spread(
        self,
        records: Iterable[bytes | Record],
        acks: str = "quorum",
        topic: str = DEFAULT_TOPIC,
    ) -> list[AppendResult] | None:
        """Append `records` spread over the partitions of `topic` record by record, as a
        Kafka producer's sends are: a keyed record to its key's partition (the same as
        `append` with that key first), unkeyed ones round robin, record by record. Each
        partition's share is one append, in the order given (atomic within that partition),
        the shares sent together. Returns an `AppendResult` per partition written, by
        partition (None with acks="none"). Not atomic across partitions: an error (the
        first one) means the other shares may have been written."""
        check_open(self._life, "AsyncClient")
        records = record_list(records)
        prepared = prepare(records)  # every record checked before any is sent
        level = parse_acks(acks)
        deadline = partial(Deadline, self.timeout, trio.current_time() + self.timeout)
        count = await self._count_within(topic, deadline)
        shares: dict[int, list[Prepared]] = {}
        for partition, record in zip(
            self._partitions_of(topic, records, count), prepared, strict=True
        ):
            shares.setdefault(partition, []).append(record)
        replies: dict[int, list[AppendReply]] = {}
        errors: list[Exception] = []

        async def append_share(partition: int) -> None:
            send = partial(self._send_append, level, topic, partition)
            lane = (topic, partition, level)
            try:
                replies[partition] = await self._batcher.append(
                    lane, shares[partition], send, deadline
                )
            except Exception as exc:  # the others go on: each share is its own append
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for partition in shares:
                nursery.start_soon(append_share, partition)
        if errors:
            raise errors[0]
        if level is Acks.NONE:
            return None
        return [append_result(replies[p], True, topic, p) for p in sorted(replies)]

    async def _append_each(
        self,
        calls: Sequence[tuple[list[bytes | Record], bool]],
        acks: str,
        topic: str,
        partition: int | None,
    ) -> list[outcome.Outcome | None]:
        """Appends made at once (the blocking Client's threads), each `(records, details)`
        still its own call: what `append` would return or raise, an outcome for each. Those
        to one partition go as one batch (as few as a batch's size allows), as calls riding
        together do, but without a task and a deadline scope each."""
        level = parse_acks(acks)
        deadline = partial(Deadline, self.timeout, trio.current_time() + self.timeout)
        results: list[outcome.Outcome | None] = [None] * len(calls)  # each set below
        valid = []
        for i, (records, details) in enumerate(calls):
            try:
                valid.append((i, records, prepare(records), details))
            except Exception as exc:  # its own bad input: it fails alone
                results[i] = outcome.Error(exc)
        count = 0
        if partition is None and valid:
            try:
                count = await self._count_within(topic, deadline)  # asked once for all
            except QuorumLogError as exc:
                for i, *_ in valid:
                    results[i] = outcome.Error(copy.copy(exc))
                return results
        lanes: dict[int, list[tuple[int, list[Prepared], bool]]] = {}
        for i, records, prepared, details in valid:
            try:
                lane = (
                    partition
                    if partition is not None
                    else self._partition_for(topic, records, count)
                )
            except Exception as exc:
                results[i] = outcome.Error(exc)
                continue
            lanes.setdefault(lane, []).append((i, prepared, details))

        async def append_batch(lane: int, batch: list[tuple[int, list[Prepared], bool]]) -> None:
            send = partial(self._send_append, level, topic, lane)
            records_each = [prepared for _, prepared, _ in batch]
            try:
                each = await self._batcher.append_together(
                    (topic, lane, level), records_each, send, deadline
                )
            except Exception as exc:  # the batch's outcome, each call its own copy
                for i, _, _ in batch:
                    results[i] = outcome.Error(copy.copy(exc))
                return
            for (i, _, details), replies in zip(batch, each, strict=True):
                results[i] = outcome.Value(append_result(replies, details, topic, lane))

        batches = [
            (lane, batch)
            for lane, items in lanes.items()
            for batch in batches_of(items, [sum([r.size for r in p]) for _, p, _ in items])
        ]
        if len(batches) == 1:
            await append_batch(*batches[0])
        elif batches:
            async with trio.open_nursery() as nursery:
                for lane, batch in batches:
                    nursery.start_soon(append_batch, lane, batch)
        return results

    async def _count_within(self, topic: str, deadline: Callable[[], Deadline]) -> int:
        """The topic's partition count: known, or asked for within `deadline` (entered only
        then: a scope with a deadline is the largest cost of a call that needs none)."""
        count = self._partition_counts.get(topic)
        if count is None:
            with deadline():
                count = await self._partition_count(topic)
        return count

    async def _send_append(
        self, acks: Acks, topic: str, partition: int, records: list[Prepared]
    ) -> list[AppendReply]:
        """The requests carrying `records` (one, unless they exceed a batch), in turn."""
        replies = []
        for chunk in split(records):
            request = self._producer.request(chunk, acks, topic, partition)
            reply = await self._call(request, to_leader=True)
            assert isinstance(reply, AppendReply)
            replies.append(reply)
        return replies

    async def read(
        self,
        offset: int,
        max_records: int = 1000,
        topic: str = DEFAULT_TOPIC,
        partition: int = 0,
    ) -> list[Record]:
        """Committed records from `offset` on. A reply holds up to 1 MiB of batches; what a
        call does not return is kept and answers the next call that reads on from where this
        one ended (a loop over small records makes one request a MiB, not one a call)."""
        check_open(self._life, "AsyncClient")
        route = (topic, partition)
        unread = self._unread.pop(route, None)
        records: list[Record] = []
        if unread is not None and unread.offset == offset:
            records, rest = unread.records, unread.batches
            if len(records) < max_records and rest:
                more, _, rest = decode_batches(rest, offset, max_records, topic, partition)
                records += more
        if not records:
            records, _, rest = await self._read(offset, max_records, topic, partition)
        records, spill = records[:max_records], records[max_records:]
        if spill or rest:
            self._unread[route] = Unread(records[-1].offset + 1, spill, rest)
        return records

    async def read_on(
        self,
        offset: int,
        max_records: int = 1000,
        topic: str = DEFAULT_TOPIC,
        partition: int = 0,
        max_bytes: int = READ_BYTES_MAX,
    ) -> tuple[list[Record], int]:
        """`read`, and the offset to read next: past the control batches (leader barriers,
        configurations) read over, so that a reader's position reaches a partition's end.
        At most `max_bytes` of batches, but always at least one whole batch."""
        records, position, _ = await self._read(offset, max_records, topic, partition, max_bytes)
        if len(records) > max_records:
            records = records[:max_records]
            position = records[-1].offset + 1
        return records, position

    async def _read(
        self,
        offset: int,
        max_records: int,
        topic: str,
        partition: int,
        max_bytes: int = READ_BYTES_MAX,
    ) -> tuple[list[Record], int, memoryview]:
        """`read_on`'s records and position, and the batches of the reply not returned."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset} is negative")
        position = offset
        with self._deadline():
            while True:
                request = ReadRequest(position, max_bytes, topic, partition, self._leader_only)
                reply = await self._call(request, to_leader=True)
                assert isinstance(reply, ReadReply)
                if not reply.batches:
                    return [], position, memoryview(b"")
                records, position, rest = decode_batches(
                    reply.batches, offset, max_records, topic, partition
                )
                if records:
                    return records, position, rest

    async def end_offset(
        self, linearizable: bool = False, topic: str = DEFAULT_TOPIC, partition: int = 0
    ) -> int:
        if not isinstance(linearizable, bool):  # end_offset("events") meant topic="events"
            raise TypeError(
                f"end_offset's first argument is linearizable, a bool, not "
                f"{type(linearizable).__name__}: name the topic, end_offset(topic=...)"
            )
        return (await self._end_offsets(linearizable, topic, partition)).commit_offset

    async def start_offset(self, topic: str = DEFAULT_TOPIC, partition: int = 0) -> int:
        return (await self._end_offsets(False, topic, partition)).log_start_offset

    async def offset_for_time(
        self, timestamp_ms: int, topic: str = DEFAULT_TOPIC, partition: int = 0
    ) -> int | None:
        """The first committed offset whose record is stamped at or after `timestamp_ms`
        (milliseconds since the epoch); None when none is, yet."""
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int):
            raise TypeError(f"timestamp_ms is an int, not {type(timestamp_ms).__name__}")
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms is at or after the epoch (0), not {timestamp_ms}")
        request = OffsetForTimeRequest(timestamp_ms, topic, partition, self._leader_only)
        with self._deadline():
            reply = await self._call(request, to_leader=True)
        assert isinstance(reply, OffsetForTimeReply)
        return reply.offset

    async def _end_offsets(self, linearizable: bool, topic: str, partition: int) -> EndOffsetReply:
        with self._deadline():
            reply = await self._call(
                EndOffsetRequest(linearizable, topic, partition, self._leader_only), to_leader=True
            )
        assert isinstance(reply, EndOffsetReply)
        return reply

    # ------------------------------------------------------------------- membership

    async def admin(self, op: str, **args) -> dict:
        """A membership change or a leadership transfer; returns when it is done (committed),
        retrying while another change or a transfer is under way, until the timeout."""
        # The leader gives up a little before this call does, so that its answer (which
        # step failed, which node it cannot reach) arrives in time to be told.
        leader_wait_s = max(self.timeout - min(ADMIN_ANSWER_MARGIN_S, self.timeout / 5), 0.1)
        request = AdminRequest(op, {**args, "timeout_s": leader_wait_s})
        with self._deadline():
            # A membership change may take long (a learner catching up): no per-try cap.
            reply = await self._call(request, to_leader=True, bounded=False, as_retry=admin_retry)
        assert isinstance(reply, AdminReply)
        return reply.result

    # ------------------------------------------------------------------- consumer groups

    async def groups(self) -> list[dict]:
        """Every consumer group: [{"group", "mode", "members"}, ...]."""
        return (await self.group_call("list", ""))["groups"]

    async def describe_group(self, name: str) -> dict:
        """The group's mode, members and, per partition, "committed" (the next offset it
        reads), "end" (the offset of the partition's last record, -1 when empty, as
        `end_offset()`), "next_offset" (Kafka's end: the offset the next record takes) and
        "lag" (records not read yet: next_offset - committed)."""
        return await self.group_call("describe", name)

    async def reset_offsets(
        self, name: str, topic: str, to: str | int | None = None, *, to_time_ms: int | None = None
    ) -> list[tuple]:
        """Set the group's positions in every partition of `topic` to "earliest", "latest"
        or an offset, or (`to_time_ms`) each partition's first record stamped at or after
        that time, its end where none is; refused while the group has members."""
        if (to is None) == (to_time_ms is None):
            raise TypeError("reset_offsets takes `to` or `to_time_ms`")
        target = to if to_time_ms is None else {"time_ms": to_time_ms}
        reply = await self.group_call("reset_offsets", name, topic=topic, to=target)
        return [tuple(o) for o in reply["offsets"]]

    async def delete_group(self, name: str) -> None:
        await self.group_call("delete", name)

    async def group_call(self, op: str, group: str, **args) -> dict:
        """One call to a consumer group's coordinator (quorumlog/client/consumer.py)."""
        with self._deadline():
            reply = await self._call(GroupRequest(op, group, args), to_leader=True)
        assert isinstance(reply, AdminReply)
        return reply.result

    async def _partition_count(self, topic: str) -> int:
        if topic not in self._partition_counts:
            await self.topics()
        count = self._partition_counts.get(topic)
        if count is None:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        return count

    async def status(self) -> list[dict]:
        """As `Client.status`: the brokers given and the members are asked together, and
        the answer with the newest cluster configuration names the members (a removed
        node still running knows an old one: quorumlog/client/protocol.py)."""
        with self._deadline():
            first = await self._call(StatusRequest(), to_leader=False)
        assert isinstance(first, StatusReply)
        answers: dict[int, dict] = {first.status["node_id"]: first.status}
        asked = {first.status["node_id"]}
        asked_addresses: set[str] = set()

        async def ask(address: str, node_id: int | None) -> None:
            try:
                reply = await self._connections.request(address, StatusRequest())
            except (QuorumLogError, ConnectionClosed):
                return
            if not isinstance(reply, StatusReply) or "node_id" not in reply.status:
                return
            if node_id is None or reply.status["node_id"] == node_id:
                answers[reply.status["node_id"]] = reply.status

        with trio.move_on_after(min(STATUS_TIMEOUT_S, self.timeout)):
            # The brokers given too: one of them may be a member the first answer does not
            # know of (it was removed before that member was added).
            wanted = {address: None for address in self._router.brokers}
            while True:
                newest = newest_status(answers.values())
                for node_id, address in members_of(newest).items():
                    if node_id not in asked:
                        wanted[address] = node_id
                wanted = {a: n for a, n in wanted.items() if a not in asked_addresses}
                if not wanted:
                    break
                async with trio.open_nursery() as nursery:
                    for address, node_id in wanted.items():
                        asked_addresses.add(address)
                        if node_id is not None:
                            asked.add(node_id)
                        nursery.start_soon(ask, address, node_id)
                asked.update(answers)
                wanted = {}
        return status_rows(newest_status(answers.values()), answers)

    # ------------------------------------------------------------------- plumbing

    def _deadline(self) -> Deadline:
        return Deadline(self.timeout)

    async def _call(
        self,
        message: Message,
        *,
        to_leader: bool,
        bounded: bool = True,
        as_retry: Callable[[Message], Message] | None = None,
    ) -> Message:
        """`as_retry`: the message to send after a try whose outcome is unknown."""
        check_open(self._life, "AsyncClient")
        route = route_of(message)
        attempts = self._router.call(route)
        # Calls a partition's leader must answer are watched (quorumlog/client/leader_watch.py).
        watched = to_leader and not self._router.direct and isinstance(message, WATCHED)
        while True:
            address = attempts.pick(to_leader)
            attempts.asking(address)
            unknown = False  # whether this try may have done its work unseen
            # A node that went silent (paused, cut off) must not hold the whole call.
            with trio.move_on_after(self.attempt_s if bounded else math.inf) as attempt:
                waiting = self._leader_watch.waiting(route, address, attempt) if watched else None
                try:
                    reply = await self._connections.request(address, message)
                except (ConnectionClosed, UnreachableError) as exc:
                    unknown = isinstance(exc, ConnectionClosed)
                    attempts.on_unreachable(address, exc)
                else:
                    unknown = isinstance(reply, ErrorReply) and reply.code is ErrorCode.UNKNOWN
                    if attempts.on_reply(address, reply):
                        return reply
                finally:
                    if waiting is not None:
                        self._leader_watch.done(waiting)
                    problem.set(attempts.problem)
            if attempt.cancelled_caught:
                unknown = True
                if waiting is not None and waiting.moved_to is not None:
                    attempts.on_replaced(address, waiting.moved_to)
                else:
                    attempts.on_unreachable(address, UnreachableError(f"{address} went silent"))
                problem.set(attempts.problem)
            if unknown and as_retry is not None:
                message = as_retry(message)
            await trio.sleep(attempts.pause_s())


@dataclass(slots=True)
class Unread:
    """What the last `read` of a partition decoded or fetched and did not return."""

    offset: int  # where that read ended: a read from here on starts with these
    records: list[Record]  # decoded, of the batch the last one returned came from
    batches: memoryview  # the reply's batches after it
