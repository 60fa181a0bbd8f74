"""A starved process gives its leaderships away (a gray failure, like a slow disk).

A node's process can stand still while the machine lives: SIGSTOP, a paused VM, a CPU
taken by others. A leader that does so keeps its leadership (its followers hear it again
before their timers run out) while every append waits out its pauses: stopped 200 ms in
every 400, it served x0.47 of a healthy leader's appends (`bench gray`). The watch wakes
every STALL_CHECK_S on trio's clock; a wake-up later than asked by more than half the
minimum election timeout means the whole process stood still that long. STALLS_MIN such
stalls within STALL_WINDOW_S (one or two may be a collector's pause or a burst of load on a
busy machine) make the node hand the groups it leads to caught-up voters, as a slow disk
does, and campaign late for `slow_fsync_cooldown_s`, so that it does not take them back.
The other nodes do not know of it: the leader balancer may give a starved preferred leader
its partitions back after BALANCE_INTERVAL_S, and the watch hands them over again.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import structlog
import trio

from quorumlog.actors.disk_health import hand_over_leaderships

if TYPE_CHECKING:
    from quorumlog.actors.node import Node

logger = structlog.get_logger("quorumlog.disk_health")

STALL_CHECK_S = 0.05
STALL_WINDOW_S = 5.0
STALLS_MIN = 3


async def watch_stalls(node: Node) -> None:
    stood_still_min_s = node.settings.election_timeout_min_s / 2
    stalls: deque[float] = deque(maxlen=STALLS_MIN)
    while True:
        asked = trio.current_time() + STALL_CHECK_S
        await trio.sleep_until(asked)
        now = trio.current_time()
        if now - asked <= stood_still_min_s:
            continue
        logger.warning(
            "process_stalled", node_id=node.id, stood_still_ms=round((now - asked) * 1000)
        )
        stalls.append(now)
        if len(stalls) == STALLS_MIN and now - stalls[0] < STALL_WINDOW_S:
            node.disk_health.stalled_s = now
            await hand_over_leaderships(node, now)
