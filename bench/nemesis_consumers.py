"""Consumers in the fault harness (bench/nemesis.py): a stream-mode group and a queue-mode
group consume the harness's topics while the faults run, and a watcher samples their
committed positions. Once everything healed they consume until each group was given every
record acknowledged with acks=quorum (or a timeout), and the checker asserts
the consumers' promises:

- every record acknowledged with acks=quorum is delivered to each group at least once;
- a committed position never goes back (sampled with `group describe` all along);
- in queue mode no record is acked twice: one whose ack was durable (its `commit`
  returned) is never delivered again.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import TYPE_CHECKING

import trio

from quorumlog import AsyncClient, AsyncConsumer, QuorumLogError
from quorumlog.bench.nemesis_cluster import NemesisCluster
from quorumlog.client.protocol import Record

if TYPE_CHECKING:
    from quorumlog.bench.history import History

GROUPS = {"stream": "nemesis-stream", "queue": "nemesis-queue"}
SESSION_TIMEOUT_S = 3.0
LEASE_TIMEOUT_S = 3.0
POLL_RECORDS = 200
WATCH_S = 0.5
DRAIN_CHECK_S = 0.5
RETRY_S = 0.2

Key = tuple[str, int, int]  # topic, partition, offset


class Consumers:
    def __init__(self, n: NemesisCluster):
        self.n = n
        self.delivered: dict[str, set[bytes]] = defaultdict(set)  # mode -> values
        self.acked: set[Key] = set()  # queue mode: acks made durable
        self.positions: dict[tuple[str, str, int], int] = {}  # (group, topic, p) -> committed
        self.violations: list[str] = []
        self.errors = 0  # calls that failed during faults (expected; a figure)
        self.last_error: dict[str, str] = {}  # mode -> the last failure, for a stall's report
        self._drained = trio.Event()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch)
            for mode in GROUPS:
                nursery.start_soon(self._member, mode)
            await self._drained.wait()
            nursery.cancel_scope.cancel()

    async def drain(self, history: History, timeout_s: float) -> bool:
        """After healing: let the members consume until each group was given every
        quorum-acked record; False if they were not within `timeout_s`. A record
        dead-lettered (leased `max_deliveries` times, every answer lost to faults) counts as
        given to the queue group."""
        wanted = self._acked_values(history)
        try:
            with trio.move_on_after(timeout_s):
                while True:
                    await self._read_dead_letters()
                    if all(wanted <= self.delivered[mode] for mode in GROUPS):
                        return True
                    await trio.sleep(DRAIN_CHECK_S)
            return False
        finally:
            self._drained.set()

    async def _read_dead_letters(self) -> None:
        with contextlib.suppress(QuorumLogError):
            async with AsyncClient(self.n.brokers, timeout=5.0) as client:
                for topic in self.n.plan.topics:
                    self.delivered["queue"] |= await _all_values(client, topic + ".dlq")

    def _acked_values(self, history: History) -> set[bytes]:
        topics = set(self.n.plan.topics)
        return {
            a.value
            for a in history.appends
            if a.topic in topics and a.acks == "quorum" and a.outcome == "ok"
        }

    async def _member(self, mode: str) -> None:
        """One member of the group, joining again after every failure."""
        while True:
            try:
                async with AsyncConsumer(
                    self.n.brokers,
                    GROUPS[mode],
                    list(self.n.plan.topics),
                    mode=mode,
                    session_timeout=SESSION_TIMEOUT_S,
                    lease_timeout=LEASE_TIMEOUT_S,
                    timeout=5.0,
                ) as consumer:
                    await self._consume(mode, consumer)
            except QuorumLogError as exc:
                await self._failed(mode, exc)

    async def _consume(self, mode: str, consumer: AsyncConsumer) -> None:
        while True:
            try:
                records = await consumer.poll(POLL_RECORDS, 0.2)
                self.delivered[mode] |= {r.value for r in records}
                if mode == "queue":
                    await self._ack(consumer, records)
                else:
                    await consumer.commit()
            except QuorumLogError as exc:
                await self._failed(mode, exc)

    async def _failed(self, mode: str, exc: QuorumLogError) -> None:
        self.errors += 1
        self.last_error[mode] = f"{type(exc).__name__}: {exc}"
        await trio.sleep(RETRY_S)

    async def _ack(self, consumer: AsyncConsumer, records: list[Record]) -> None:
        keys = {(r.topic, r.partition, r.offset) for r in records}
        again = keys & self.acked
        if again:
            self.violations.append(
                f"queue: records acked before were delivered again: {sorted(again)[:5]}"
            )
        for r in records:
            await consumer.ack(r)
        await consumer.commit()  # raises if an ack was refused: then none is counted
        self.acked |= keys

    async def _watch(self) -> None:
        """Committed positions, sampled: none may go back."""
        async with AsyncClient(self.n.brokers, timeout=2.0) as client:
            while True:
                await trio.sleep(WATCH_S)
                for group in GROUPS.values():
                    try:
                        rows = (await client.describe_group(group))["partitions"]
                    except QuorumLogError:
                        continue  # not created yet, or its coordinator is moving
                    for row in rows:
                        self._saw_position(group, row)

    def _saw_position(self, group: str, row: dict) -> None:
        if row["committed"] is None:
            return
        key = (group, row["topic"], row["partition"])
        before = self.positions.get(key)
        if before is not None and row["committed"] < before:
            self.violations.append(
                f"{group} {row['topic']}/{row['partition']}: committed position went back "
                f"from {before} to {row['committed']}"
            )
        self.positions[key] = max(row["committed"], before or 0)

    def check(self, history: History) -> dict:
        """Figures and violations: every quorum-acked record of the topics delivered."""
        acked = self._acked_values(history)
        violations = list(self.violations)
        for mode in GROUPS:
            missing = acked - self.delivered[mode]
            if missing:
                violations.append(
                    f"{mode} group: {len(missing)} quorum-acked records never delivered, "
                    f"e.g. {sorted(missing)[:3]}"
                )
        figures = {f"{mode}_delivered": len(self.delivered[mode] & acked) for mode in GROUPS}
        return {
            **figures,
            "queue_acked": len(self.acked),
            "consumer_errors": self.errors,
            "violations": violations,
        }


async def _all_values(client: AsyncClient, topic: str) -> set[bytes]:
    if topic not in await client.topics():
        return set()
    values: set[bytes] = set()
    offset = 0
    while True:
        records, offset = await client.read_on(offset, 1000, topic, 0)
        if not records:
            return values
        values |= {r.value for r in records}
