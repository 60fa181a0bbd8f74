"""A planned stop hands leadership over first (Kafka's controlled shutdown).

Told to stop (SIGTERM, Ctrl-C), a node that just closed its sockets would leave each group
it leads to an election: clients wait out an election timeout (0.4-0.6 s measured), on
every node of a rolling restart. Instead, each group it leads first moves its leadership
to its most caught-up live voter by a transfer (TimeoutNow: tens of ms), a few groups at a
time, and the node stops once it leads nothing, when its transfers stop succeeding (the
other nodes are stopping too), or after `timeout_s` anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog
import trio

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor

logger = structlog.get_logger("quorumlog.shutdown")

HAND_OVER_S = 5.0
TRANSFERS_IN_FLIGHT_MAX = 32
POLL_S = 0.02


async def hand_over_leadership(
    node_id: int,
    groups: Mapping[int, ReplicaActor],
    election_timeout_min_s: float,
    timeout_s: float = HAND_OVER_S,
) -> int:
    """Move every leadership this node holds to another voter (the node, stopping, takes
    none back); returns how many groups it still led when it gave up."""
    leading = [g for g in groups.values() if g.view.is_leader]
    # No leadership left this node for most of an election timeout (a transfer takes tens
    # of ms): its targets refuse (all the nodes are stopping) or are gone, and waiting
    # longer would only delay the stop.
    patience_s = election_timeout_min_s + 0.1
    last_moved = trio.current_time()
    with trio.move_on_after(timeout_s):
        while leading and trio.current_time() - last_moved < patience_s:
            moving = sum(g.view.transfer_to is not None for g in leading)
            for group in leading:
                if moving >= TRANSFERS_IN_FLIGHT_MAX:
                    break
                if group.view.transfer_to is None and await group.hand_to_live_voter() is not None:
                    moving += 1
            if not moving:
                break  # nowhere to hand any of them
            await trio.sleep(POLL_S)
            still = [g for g in leading if g.view.is_leader]
            if len(still) < len(leading):
                last_moved = trio.current_time()
            leading = still
    logger.info("leadership_handed_over", node_id=node_id, still_leading=len(leading))
    return len(leading)
