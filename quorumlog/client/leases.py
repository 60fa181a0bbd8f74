"""Queue mode's side of a consumer: the records leased to it, and its acks and releases
not sent yet. They go with its next lease call (or `commit`), so that acking costs no call
of its own; `commit` makes them durable and says which were refused (a lease that ran out
and went to another member)."""

from __future__ import annotations

from quorumlog.client.aclient import AsyncClient
from quorumlog.client.errors import QuorumLogError
from quorumlog.client.protocol import Record, records_at

Key = tuple[str, int, int]  # topic, partition, offset


class Leases:
    def __init__(
        self,
        client: AsyncClient,
        group: str,
        member: str,
        start: str,
        lease_timeout_s: float,
        max_deliveries: int,
    ):
        self._client = client
        self._group = group
        self._args = {
            "member": member,
            "start": start,
            "lease_timeout_ms": round(lease_timeout_s * 1000),
            "max_deliveries": max_deliveries,
        }
        self._leased: set[Key] = set()
        self._pending: dict[tuple[str, int, str], list[int]] = {}
        self._refused: list[list] = []

    def settle(self, record: Record, outcome: str) -> None:
        key = (record.topic, record.partition, record.offset)
        if key not in self._leased:
            raise QuorumLogError(
                f"record {key[0]}/{key[1]} offset {key[2]} is not leased to this member "
                "(settled already, or never delivered here)"
            )
        self._leased.discard(key)
        self._pending.setdefault((key[0], key[1], outcome), []).append(key[2])

    async def lease(self, max_records: int) -> list[Record]:
        """Send what is pending; up to `max_records` records leased to this member."""
        settle = [[t, p, outcome, offsets] for (t, p, outcome), offsets in self._pending.items()]
        self._pending = {}
        reply = await self._client.group_call(
            "lease", self._group, **self._args, max_records=max_records, settle=settle
        )
        self._refused += reply["refused"]
        records = [
            r
            for t, p, offsets, batches in reply["leases"]
            for r in records_at(batches, offsets, t, p)
        ]
        self._leased.update((r.topic, r.partition, r.offset) for r in records)
        return records

    async def flush(self) -> None:
        """Make every ack and release so far durable (acks=quorum); raises if some were
        refused since the last flush."""
        await self.lease(0)
        refused, self._refused = self._refused, []
        if refused:
            t, p, outcome, offsets, why = refused[0]
            raise QuorumLogError(
                f"{sum(len(r[3]) for r in refused)} settlements refused, first {outcome} of "
                f"{t}/{p} offsets {offsets}: {why}"
            )

    def forget(self) -> None:
        """This member was removed from its group: what it held is handed back already."""
        self._leased.clear()
        self._pending.clear()
