"""`AsyncConsumer` and `Consumer`: a member of a consumer group.

In stream mode each partition of the group's topics is consumed by one member at a time.
The member heartbeats its group's coordinator in the background, reporting the partitions
it consumes; the answer says which it should consume (its target) and which it may start
now (granted: nobody else still consumes them). Changes are made inside `poll`, as Kafka
makes them: a partition taken away is committed at the position after the records the
previous polls returned (the application asked for more, so it is done with them) and
released; a granted one starts from its committed position, or from `start` if it has
none. A member that commits before it stops therefore leaves no duplicate to the next
owner, and one that crashes leaves at most what it consumed since its last commit.

In queue mode any number of members share every partition: each `poll` leases records
to this member (`lease_timeout`), `ack` settles one, `release` hands it back; both are
sent with the next poll or `commit` (consumers/queue.py and actors/coordinator/queue_calls.py say
how the coordinator keeps the leases).

What a member reads ahead of `poll`, all its partitions together, stays within
`buffer_bytes` (64 MiB by default; quorumlog/client/fetcher.py says how it is shared).

`Consumer` is the blocking form: it runs an `AsyncConsumer` on a trio loop of its own.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Sequence

import trio

from quorumlog.client.aclient import AsyncClient, Life, check_open
from quorumlog.client.errors import (
    CallTimeoutError,
    NotMemberError,
    QuorumLogError,
    UnreachableError,
)
from quorumlog.client.fetcher import BUFFER_BYTES, PartitionFetch, ReadAheadBudget
from quorumlog.client.leases import Leases
from quorumlog.client.loop_thread import LoopThread
from quorumlog.client.protocol import Record
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.state import MODES

STARTS = ("earliest", "latest")
LEASE_PAUSE_S_MIN = 0.005  # queue mode, nothing to lease: ask again, doubling up to the max
LEASE_PAUSE_S_MAX = 0.1


class AsyncConsumer:
    def __init__(
        self,
        brokers: str | Sequence[str],
        group: str,
        topics: Sequence[str] | str,
        start: str = "earliest",
        mode: str = "stream",
        session_timeout: float = 10.0,
        lease_timeout: float = 30.0,
        max_deliveries: int = 5,
        timeout: float = 10.0,
        buffer_bytes: int = BUFFER_BYTES,
        secret: bytes | str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ):
        if start not in STARTS:
            raise ValueError(f"start is one of {', '.join(STARTS)}, not {start!r}")
        if mode not in MODES:
            raise ValueError(f"mode is one of {', '.join(MODES)}, not {mode!r}")
        self.group = group
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.start = start
        self.mode = mode
        self.session_timeout = session_timeout
        self.member = uuid.uuid4().hex
        self.lease_timeout = lease_timeout
        self._client = AsyncClient(
            brokers,
            secret=secret,
            timeout=timeout,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )
        self._leases = Leases(
            self._client, group, self.member, start, lease_timeout, max_deliveries
        )  # queue mode
        self._fetches: dict[TopicPartition, PartitionFetch] = {}  # the partitions consumed
        self._read_ahead = ReadAheadBudget(buffer_bytes)  # all their buffers together
        self._committed: dict[TopicPartition, int | None] = {}  # as last known
        self._target: set[TopicPartition] = set()
        self._granted: dict[TopicPartition, int | None] = {}  # may start: committed position
        self._heard = -math.inf  # when the coordinator last answered a heartbeat
        self._interval_s = min(0.5, session_timeout / 10)
        self._beat_now = trio.Event()
        self._joined = False
        self._failure: QuorumLogError | None = None  # what stopped the heartbeats
        self._rotation = 0
        self._arrived = trio.Event()  # set when a fetch task buffered records
        self._nursery: trio.Nursery | None = None
        self._stack = contextlib.AsyncExitStack()
        self._life = Life.NEW

    async def __aenter__(self) -> AsyncConsumer:
        if self._life is Life.OPEN:
            raise RuntimeError("the AsyncConsumer is open already: enter it once")
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self._client)
            await self._join()
            stack.push_async_callback(self._leave)  # runs after the heartbeats stopped
            nursery = self._nursery = await stack.enter_async_context(trio.open_nursery())
            nursery.start_soon(self._heartbeats)
            stack.callback(nursery.cancel_scope.cancel)
            self._stack = stack.pop_all()
        self._life = Life.OPEN
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool | None:
        self._life = Life.CLOSED
        return await self._stack.__aexit__(exc_type, exc, tb)

    # ------------------------------------------------------------------- the API

    async def poll(self, max_records: int = 500, timeout: float = 1.0) -> list[Record]:
        """Up to `max_records` records from the partitions this member consumes, waiting
        up to `timeout` seconds for some."""
        deadline = trio.current_time() + timeout
        if self.mode == "queue":
            return await self._poll_queue(max_records, deadline)
        while True:
            self._check()
            await self._rebalance()
            records = self._take(max_records)
            if records or trio.current_time() >= deadline:
                return records
            self._arrived = trio.Event()
            with trio.move_on_at(min(deadline, trio.current_time() + self._interval_s)):
                await self._arrived.wait()  # or a heartbeat's news, checked by _rebalance

    async def commit(self) -> None:
        """Stream mode: make the positions after the records polled so far durable
        (acks=quorum). Queue mode: make the acks and releases so far durable; raises if
        some were refused (their lease ran out: the records go to another member)."""
        self._check()
        if self.mode == "queue":
            await self._leases.flush()
        else:
            await self._commit(list(self._fetches))

    async def ack(self, record: Record) -> None:
        """Queue mode: `record` is done; sent with the next poll or commit. (Stream mode
        has no acks: `commit` the position after what `poll` returned.)"""
        self._settle(record, "ack")

    async def release(self, record: Record) -> None:
        """Queue mode: hand `record` back at once, for any member (itself included)."""
        self._settle(record, "release")

    def _settle(self, record: Record, outcome: str) -> None:
        check_open(self._life, "AsyncConsumer")
        if self.mode != "queue":
            raise QuorumLogError(
                f'{outcome} is for queue mode only (Consumer(..., mode="queue")): this '
                f"consumer of group {self.group!r} is in {self.mode} mode, where commit() "
                "makes the position after the polled records durable"
            )
        self._leases.settle(record, outcome)

    async def assignment(self) -> list[TopicPartition]:
        """The partitions this member consumes now (in queue mode, every one)."""
        self._check()
        if self.mode == "queue":
            counts = await self._client.topics()
            return sorted((t, p) for t in self.topics for p in range(counts.get(t, 0)))
        await self._rebalance()
        return sorted(self._fetches)

    async def _poll_queue(self, max_records: int, deadline: float) -> list[Record]:
        pause = LEASE_PAUSE_S_MIN
        while True:
            self._check()
            try:
                records = await self._leases.lease(max_records) if self._joined else []
            except NotMemberError:
                self._lost_membership()
                records = []
            left = deadline - trio.current_time()
            if records or left <= 0:
                return records
            await trio.sleep(min(pause, left))
            pause = min(pause * 2, LEASE_PAUSE_S_MAX)

    def _check(self) -> None:
        check_open(self._life, "AsyncConsumer")
        if self._failure is not None:
            raise self._failure

    # ------------------------------------------------------------------- membership

    async def _join(self) -> None:
        reply = await self._client.group_call(
            "join",
            self.group,
            member=self.member,
            mode=self.mode,
            topics=self.topics,
            session_timeout_ms=round(self.session_timeout * 1000),
            lease_timeout_ms=round(self.lease_timeout * 1000),
        )
        self._joined = True
        self._on_assignment(reply)

    async def _leave(self) -> None:
        """Leave at once, rather than after a session timeout: the partitions move now, and
        a queue member's acks so far are sent first (what it still holds is handed back)."""
        if self._joined:
            self._joined = False
            with trio.move_on_after(self._client.timeout), contextlib.suppress(QuorumLogError):
                if self.mode == "queue":
                    await self._leases.lease(0)
                await self._client.group_call("leave", self.group, member=self.member)

    async def _heartbeats(self) -> None:
        while True:
            with trio.move_on_after(self._interval_s):
                await self._beat_now.wait()
            self._beat_now = trio.Event()
            try:
                if not self._joined:
                    await self._join()
                    continue
                reply = await self._client.group_call(
                    "heartbeat",
                    self.group,
                    member=self.member,
                    owned=[list(tp) for tp in sorted(self._claimed())],
                    lease_timeout_ms=round(self.lease_timeout * 1000),
                )
            except NotMemberError:
                self._lost_membership()
            except (CallTimeoutError, UnreachableError):
                continue  # the coordinator is moving; a session outlasts a few of these
            except QuorumLogError as exc:  # definite (the topic was deleted, say)
                self._failure = exc
                return
            else:
                self._on_assignment(reply)

    def _lost_membership(self) -> None:
        """Expired (or the coordinator lost us): what we consumed may have a new owner
        already, and our leases were handed back. Join again; a stream member starts from
        the committed positions."""
        self._joined = False
        self._stop_all()
        self._leases.forget()
        self._beat_now.set()

    def _claimed(self) -> set[TopicPartition]:
        """What this member consumes, or was granted and may start at its next poll."""
        return set(self._fetches) | (set(self._granted) & self._target)

    def _on_assignment(self, reply: dict) -> None:
        self._heard = trio.current_time()
        self._interval_s = reply["heartbeat_interval_s"]
        self._target = {(t, p) for t, p in reply["target"]}
        self._granted = {(t, p): committed for t, p, committed in reply["granted"]}

    async def _rebalance(self) -> None:
        """Apply what the coordinator last said: release partitions taken away (their
        positions committed first), start granted ones."""
        if trio.current_time() - self._heard > self.session_timeout:
            # Silent coordinator: our session may have run out, and our partitions may
            # have new owners. Stop consuming until it answers again.
            self._stop_all()
            return
        # What the coordinator said when this began: the heartbeat may bring a new answer
        # while a commit or a start position is awaited (one with a partition fewer: a
        # KeyError once, under bench soak). A partition started that is no longer ours is
        # released at the next poll.
        granted = dict(self._granted)
        revoked = [tp for tp in self._fetches if tp not in self._target]
        if revoked:
            await self._commit(revoked)
            for tp in revoked:
                self._drop(self._fetches.pop(tp))
        started = [tp for tp in granted if tp not in self._fetches]
        self._read_ahead.partitions = len(self._fetches) + len(started)
        for tp in started:
            position = await self._start_position(tp, granted[tp])
            fetch = PartitionFetch(*tp, position, self._read_ahead)
            self._fetches[tp] = fetch
            self._committed[tp] = granted[tp]
            assert self._nursery is not None
            self._nursery.start_soon(fetch.run, self._client, self._arrived_now, self._failed)
        if revoked or started:
            self._beat_now.set()  # tell the coordinator now: the next owner is waiting

    async def _start_position(self, tp: TopicPartition, committed: int | None) -> int:
        if committed is not None:
            return committed
        topic, partition = tp
        if self.start == "earliest":
            return await self._client.start_offset(topic, partition)
        return await self._client.end_offset(topic=topic, partition=partition) + 1

    async def _commit(self, tps: list[TopicPartition]) -> None:
        offsets = [
            [t, p, position]
            for t, p in tps
            if (fetch := self._fetches.get((t, p))) is not None
            and (position := fetch.position) != self._committed.get((t, p))
        ]
        if not offsets:
            return
        await self._client.group_call("commit", self.group, member=self.member, offsets=offsets)
        for t, p, offset in offsets:
            self._committed[(t, p)] = offset

    # ------------------------------------------------------------------- reading

    def _take(self, max_records: int) -> list[Record]:
        """Buffered records of the consumed partitions, each in turn first (so that a busy
        one does not starve the others)."""
        tps = sorted(self._fetches)
        if not tps:
            return []
        self._rotation = (self._rotation + 1) % len(tps)
        out: list[Record] = []
        for tp in tps[self._rotation :] + tps[: self._rotation]:
            out += self._fetches[tp].take(max_records - len(out))
        return out

    def _arrived_now(self) -> None:
        self._arrived.set()

    def _failed(self, error: QuorumLogError) -> None:
        self._failure = error
        self._arrived.set()

    def _stop_all(self) -> None:
        for fetch in self._fetches.values():
            self._drop(fetch)
        self._fetches.clear()

    @staticmethod
    def _drop(fetch: PartitionFetch) -> None:
        fetch.scope.cancel()
        fetch.drop()


class Consumer:
    """The blocking `AsyncConsumer`: the same arguments and methods."""

    def __init__(self, brokers: str | Sequence[str], group: str, topics, **kwargs):
        self._consumer = AsyncConsumer(brokers, group, topics, **kwargs)
        self._loop = LoopThread(
            self._consumer, "consumer", ": use it as `with Consumer(...) as c:`"
        )

    @property
    def member(self) -> str:
        return self._consumer.member

    def __enter__(self) -> Consumer:
        self._loop.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._loop.close()

    def _call(self, fn, *args):
        return self._loop.run(fn, *args)

    def poll(self, max_records: int = 500, timeout: float = 1.0) -> list[Record]:
        return self._call(self._consumer.poll, max_records, timeout)

    def commit(self) -> None:
        self._call(self._consumer.commit)

    def ack(self, record: Record) -> None:
        self._call(self._consumer.ack, record)

    def release(self, record: Record) -> None:
        self._call(self._consumer.release, record)

    def assignment(self) -> list[TopicPartition]:
        return self._call(self._consumer.assignment)
