"""The faults of a simulated cluster (bench/simulation.py): crashes, partitions, lossy
links and slow disks, membership changes, and lost leader-table messages, each drawn from
the run's seed."""

from __future__ import annotations

import random

import trio

from quorumlog.bench.sim_cluster import Cluster
from quorumlog.transport.memory import PERFECT_LINK, LinkFaults
from quorumlog.transport.messages import AdminRequest, LeaderDigest, LeaderUpdates

TABLE_MESSAGES = frozenset({LeaderUpdates, LeaderDigest})
TABLE_LOSS_SEED = 0x7AB1E


async def chaos(cluster: Cluster, nursery: trio.Nursery, duration_s: float) -> None:
    """Crashes and restarts, partitions, lossy links, slow disks, drawn from the seed."""
    rng = cluster.rng
    size = len(cluster.nodes)
    end = trio.current_time() + duration_s
    while trio.current_time() < end:
        await trio.sleep(rng.uniform(0.05, 0.6))
        action = rng.random()
        down = [i for i in cluster.nodes if cluster.nodes[i].node is None]
        if action < 0.25 and cluster.running():
            # Mostly a minority, sometimes a majority or everyone: safety must hold anyway.
            if len(down) < (size - 1) // 2 or rng.random() < 0.2:
                await cluster.crash(rng.choice(cluster.running()))
        elif action < 0.45 and down:
            await cluster.start(nursery, rng.choice(down))
        elif action < 0.58:
            ids = list(cluster.nodes)
            rng.shuffle(ids)
            cut = rng.randint(1, size - 1)
            cluster.network.partition(ids[:cut], ids[cut:], one_way=rng.random() < 0.2)
            cluster.trace.append(f"partition {ids[:cut]} {ids[cut:]}")
        elif action < 0.7:
            cluster.network.heal()
            cluster.trace.append("heal")
        elif action < 0.8:
            faults = LinkFaults(
                drop_probability=rng.uniform(0, 0.2),
                delay_s_min=0.0,
                delay_s_max=rng.uniform(0, 0.05),
                duplicate_probability=rng.uniform(0, 0.1),
                reorder_probability=rng.uniform(0, 0.2),
            )
            cluster.set_link_faults(faults)
            cluster.trace.append("lossy")
        elif action < 0.88:
            cluster.set_link_faults(PERFECT_LINK)
            cluster.trace.append("perfect")
        elif action < 0.95:
            # A slow disk, the leader's as likely as any: commits go on through the
            # followers that flushed (gray failures, RELIABILITY round 2).
            slow = rng.choice(list(cluster.nodes))
            cluster.nodes[slow].fsync_s = rng.uniform(0.01, 0.08)
            cluster.trace.append(f"slow disk {slow}")
        else:
            cluster.heal_disks()
            cluster.trace.append("disks healed")


async def membership_chaos(cluster: Cluster, duration_s: float) -> None:
    """Membership changes and leadership transfers, through the admin calls (sent to the
    controller's leader: cluster membership is its group's)."""
    rng = random.Random(cluster.rng.getrandbits(64))
    end = trio.current_time() + duration_s
    while trio.current_time() < end:
        await trio.sleep(rng.uniform(0.2, 1.0))
        leader = next(
            (s.node for s in cluster.nodes.values() if s.node and s.node.controller.core.is_leader),
            None,
        )
        if leader is None or leader.controller.core.config is None:
            continue
        config = leader.controller.core.config
        voters = sorted(config.voters)
        outsiders = sorted(set(cluster.nodes) - config.members)
        choice = rng.random()
        if choice < 0.4 and outsiders:  # a node left out comes back, often as a witness
            node_id = rng.choice(outsiders)
            request = AdminRequest(
                "add_member",
                {
                    "node_id": node_id,
                    "address": cluster.addresses[node_id],
                    "witness": rng.random() < 0.5,  # seed 000's witness ("LV")
                },
            )
        elif choice < 0.4 and len(voters) > 2:
            request = AdminRequest("remove_member", {"node_id": rng.choice(voters)})
        elif choice < 0.5 and len(voters) > 2:
            request = AdminRequest("demote_member", {"node_id": rng.choice(voters)})
        elif choice < 0.55 and (config.witnesses or config.log_only):
            node_id = rng.choice(sorted(config.witnesses | config.log_only))
            request = AdminRequest("promote_member", {"node_id": node_id})
        elif choice < 0.65 and outsiders:
            new = rng.choice(outsiders)
            request = AdminRequest(
                "replace_member",
                {"old_id": rng.choice(voters), "new_id": new, "address": cluster.addresses[new]},
            )
        elif choice < 0.8:
            chosen = rng.sample(sorted(cluster.nodes), rng.randint(2, len(cluster.nodes)))
            request = AdminRequest(
                "set_members", {"members": {str(i): cluster.addresses[i] for i in chosen}}
            )
        else:
            request = AdminRequest("transfer_leader", {"node_id": rng.choice(voters)})
        cluster.trace.append(f"admin {request.op} {sorted(request.args.items())}")
        with trio.move_on_after(3.0):
            reply = await cluster.request(
                leader.id, AdminRequest(request.op, {**request.args, "timeout_s": 2.5})
            )
            cluster.trace.append(f"admin reply {type(reply).__name__}")


async def lost_leader_tables(cluster: Cluster, duration_s: float) -> None:
    """Windows in which every leader-table message is lost while Raft's go through: what
    the tables miss meanwhile must be repaired once the windows end (drawn from a
    generator of its own, so that the other faults of a seed stay as they were)."""
    rng = random.Random(cluster.seed + TABLE_LOSS_SEED)
    network = cluster.network
    end = trio.current_time() + duration_s
    while trio.current_time() < end:
        await trio.sleep(rng.uniform(0.2, 1.5))
        network.dropped_types = frozenset() if network.dropped_types else TABLE_MESSAGES
        cluster.trace.append(f"table messages {'lost' if network.dropped_types else 'carried'}")
    network.dropped_types = frozenset()
