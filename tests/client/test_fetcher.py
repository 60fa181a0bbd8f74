"""The read-ahead budget of a consumer (quorumlog/client/fetcher.py), with a stand-in client."""

from __future__ import annotations

import trio

from quorumlog.client.fetcher import PartitionFetch, ReadAheadBudget
from quorumlog.client.protocol import Record


class _Client:
    """Answers one read with records, and cancels the fetch as it does: the revoke of a
    partition that lands while its read comes back."""

    def __init__(self, fetch: PartitionFetch):
        self.fetch = fetch

    async def read_on(self, offset, max_records, topic, partition, max_bytes):
        await trio.lowlevel.checkpoint()
        self.fetch.scope.cancel()
        return [Record(b"x" * 1000, offset=offset + i) for i in range(10)], offset + 10


async def test_a_fetch_dropped_as_its_read_returns_gives_all_its_room_back():
    budget = ReadAheadBudget(1 << 20)
    fetch = PartitionFetch("t", 0, 0, budget)
    await fetch.run(_Client(fetch), arrived=lambda: None, failed=lambda exc: None)
    assert budget.used == 0


async def test_reads_ask_for_no_more_than_the_partitions_share():
    budget = ReadAheadBudget(1 << 20)
    budget.partitions = 4
    asked = []

    class Recorder:
        async def read_on(self, offset, max_records, topic, partition, max_bytes):
            asked.append(max_bytes)
            await trio.sleep_forever()

    fetch = PartitionFetch("t", 0, 0, budget)
    with trio.move_on_after(0.01):
        await fetch.run(Recorder(), arrived=lambda: None, failed=lambda exc: None)
    assert asked == [budget.share] and budget.share == (1 << 20) // 4
