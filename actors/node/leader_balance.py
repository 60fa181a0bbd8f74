"""Leader balancing: each partition's leadership goes back to its preferred replica.

Placement makes the first replica of each partition its preferred leader and spreads
those evenly over the nodes. After a failover (a node restarted, say) the survivors lead
its partitions; every few seconds each node hands the partitions it leads back to their
preferred replica once that replica is live, by leadership transfer (seed 002's forced
leadership for load balancing). `default` and the controller stay where they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from quorumlog.controller.state import DEFAULT_TOPIC, TopicError

if TYPE_CHECKING:
    from quorumlog.actors.node.node import Node

BALANCE_INTERVAL_S = 5.0
TRANSFERS_PER_PASS_MAX = 32  # leadership moves a little at a time, not in one storm


async def balance_leaders(node: Node) -> None:
    while True:
        await trio.sleep(BALANCE_INTERVAL_S)
        started = 0
        for (topic, partition), group in list(node.partitions.items()):
            if topic == DEFAULT_TOPIC or not group.view.is_leader:
                continue
            try:
                preferred = node.controller_actor.state.partition(topic, partition).replicas[0]
            except TopicError:
                continue
            if preferred == node.id or node.disk_health.avoided(preferred, trio.current_time()):
                continue  # a slow disk gets no leadership back until it has been healthy
            if await group.hand_to_live_voter(lambda _live, t=preferred: t) is not None:
                started += 1
                if started >= TRANSFERS_PER_PASS_MAX:
                    break
