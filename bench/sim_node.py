"""One machine of a simulated cluster (bench/simulation.py): its node, its in-memory disk
whose blocking calls take simulated time, and its wall clock, skewed from the others'."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from quorumlog.actors.node.node import Node
from quorumlog.log.memdisk import MemoryFileSystem

WALL_CLOCK_START_S = 1.8e9


@dataclass
class SimNode:
    node_id: int
    fs: MemoryFileSystem = field(default_factory=MemoryFileSystem)
    node: Node | None = None
    scope: trio.CancelScope | None = None
    stopped: trio.Event | None = None
    # by group replica (group id, incarnation): a replica moved away and back is a new one
    last_commit: dict[tuple[int, str], int] = field(default_factory=dict)
    led: set[tuple[int, str]] = field(default_factory=set)  # replicas that were leaders
    # How long each of its disk's blocking calls (fsync, metadata, new files) takes: a
    # little for every node, much more while the chaos makes its disk slow.
    base_fsync_s: float = 0.0
    fsync_s: float = 0.0
    # How far its wall clock is off (seconds): leaders stamp `default`'s batches with it.
    clock_skew_s: float = 0.0
    # One blocking call at a time, as on the node's one storage thread (the election
    # storms need it; the other kinds let calls overlap).
    one_storage_thread: bool = False
    storage_thread: trio.Lock = field(default_factory=trio.Lock)

    def wall_clock_ms(self) -> int:
        return int((WALL_CLOCK_START_S + trio.current_time() + self.clock_skew_s) * 1000)

    async def run_sync(self, fn, *args):
        """The in-memory disk's blocking calls, taking as long as this node's disk does:
        nothing is durable before the wait ends (a crash meanwhile loses it)."""
        if self.one_storage_thread:
            async with self.storage_thread:
                await trio.sleep(self.fsync_s)
                return fn(*args)
        if self.fsync_s:
            await trio.sleep(self.fsync_s)
        return fn(*args)
