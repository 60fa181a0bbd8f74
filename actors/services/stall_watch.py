"""A starved process gives its leaderships away (a gray failure, like a slow disk).

A node's process can stand still while the machine lives: SIGSTOP, a paused VM, a CPU
taken by others. A leader that does so keeps its leadership (its followers hear it again
before their timers run out) while every append waits out its pauses: stopped 200 ms in
every 400, it served x0.47 of a healthy leader's appends (`bench gray`). The watch wakes
every STALL_CHECK_S on trio's clock; a wake-up later than asked by more than half the
minimum election timeout means the whole process stood still that long. It tells the
node's disk health (actors/services/disk_health.py), where a starved process counts as a slow disk:
compared with its peers' figures, it hands its groups over to caught-up voters and is
avoided by everyone's leader balancer for `slow_fsync_cooldown_s`. Stalls every node has
at once (a machine short of CPU for all of them) move nothing: before they were compared,
each node handed its leaderships to the others, which were as starved, and the moves took
the CPU they lacked (a 1,000-partition cluster went on electing for minutes).
"""

from __future__ import annotations

import structlog
import trio

from quorumlog.actors.services.disk_health import DiskHealth

logger = structlog.get_logger("quorumlog.disk_health")

STALL_CHECK_S = 0.05


async def watch_stalls(node_id: int, election_timeout_min_s: float, health: DiskHealth) -> None:
    stood_still_min_s = election_timeout_min_s / 2
    while True:
        asked = trio.current_time() + STALL_CHECK_S
        await trio.sleep_until(asked)
        now = trio.current_time()
        if now - asked <= stood_still_min_s:
            continue
        logger.warning(
            "process_stalled", node_id=node_id, stood_still_ms=round((now - asked) * 1000)
        )
        health.process_stalled(now - asked, now)
