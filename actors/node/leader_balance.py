"""Where leadership goes back to: each partition's preferred replica, and away from a slow
disk.

Placement makes the first replica of each partition its preferred leader and spreads
those evenly over the nodes. After a failover (a node restarted, say) the survivors lead
its partitions; every few seconds each node hands the partitions it leads back to their
preferred replica once that replica is live, by leadership transfer (seed 002's forced
leadership for load balancing). `default` and the controller stay where they are.

A node whose own disk stays slow hands every group it leads to the caught-up voter with
the fastest disk, and an avoided node gets no leadership back until it has been healthy
(actors/services/disk_health.py says who is slow and who is avoided).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog
import trio

from quorumlog.actors.services.disk_health import CHECK_INTERVAL_S, DiskHealth
from quorumlog.controller.state import DEFAULT_TOPIC, ClusterState, TopicError

if TYPE_CHECKING:
    from collections.abc import Callable

    from quorumlog.actors.replica.actor import ReplicaActor

logger = structlog.get_logger("quorumlog.disk_health")

BALANCE_INTERVAL_S = 5.0
TRANSFERS_PER_PASS_MAX = 32  # leadership moves a little at a time, not in one storm
HAND_OVERS_PER_CHECK_MAX = 64  # many partitions move a little at a time, not in one storm


async def balance_leaders(
    node_id: int,
    partitions: Mapping[tuple[str, int], ReplicaActor],
    cluster_state: Callable[[], ClusterState],
    health: DiskHealth,
) -> None:
    """Every BALANCE_INTERVAL_S, hand the partitions this node leads to their preferred
    replicas (`cluster_state`: the controller's state as this node knows it now)."""
    while True:
        await trio.sleep(BALANCE_INTERVAL_S)
        started = 0
        for (topic, partition), group in list(partitions.items()):
            if topic == DEFAULT_TOPIC or not group.view.is_leader:
                continue
            try:
                preferred = cluster_state().partition(topic, partition).replicas[0]
            except TopicError:
                continue
            if preferred == node_id or health.avoided(preferred, trio.current_time()):
                continue  # a slow disk gets no leadership back until it has been healthy
            if await group.hand_to_live_voter(lambda _live, t=preferred: t) is not None:
                started += 1
                if started >= TRANSFERS_PER_PASS_MAX:
                    break


async def hand_over_from_slow_disk(
    node_id: int, groups: Mapping[int, ReplicaActor], health: DiskHealth
) -> None:
    """While this node's disk stays slow, give the groups it leads to healthier voters."""
    while True:
        await trio.sleep(CHECK_INTERVAL_S)
        now = trio.current_time()
        health.judge(now)
        if health.should_hand_over(now):
            await _hand_over_leaderships(node_id, groups, health, now)


async def _hand_over_leaderships(
    node_id: int, groups: Mapping[int, ReplicaActor], health: DiskHealth, now: float
) -> None:
    """Give the groups this node leads to the caught-up voters with the fastest disks, a
    bounded number at a time."""
    moved = 0
    for group in list(groups.values()):
        view = group.view
        if not view.is_leader or view.transfer_to is not None:
            continue
        target = await group.hand_to_live_voter(lambda live: health.fastest(live, now))
        if target is not None:
            logger.info(
                "leadership_handed_over", node_id=node_id, group=group.group_id, target=target
            )
            moved += 1
            if moved >= HAND_OVERS_PER_CHECK_MAX:
                break
