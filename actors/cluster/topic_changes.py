"""The topic changes the controller's leader answers (actors/cluster/controller.py routes them here):
a topic's settings, more partitions, another replication factor, a partition moved to
named nodes, the moves still under way, and a partition's log start moved (a trim).

Each change is decided here, on a state that is up to date, and appended as one command
(or one per partition moved) with acks=quorum: every node applies it alike, and a change
asked again finds it made and answers as the first time did. Replicas follow a new set
through the partition's own group (actors/cluster/mover.py drives learners, catch-up and joint
consensus); the call returns once the new sets are committed, and `moves` tells how far
each got.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from quorumlog.actors.cluster import rebalancer
from quorumlog.actors.cluster.leader_calls import ask_partition_leader
from quorumlog.actors.cluster.topic_calls import ask_nodes, leaders_elected, wait_live_brokers
from quorumlog.controller.commands import (
    AddPartitions,
    AlterTopicConfig,
    SetReplicas,
    TrimPartition,
)
from quorumlog.controller.placement import place, resize
from quorumlog.controller.state import (
    DEFAULT_TOPIC,
    PARTITIONS_MAX,
    ClusterState,
    Topic,
    TopicError,
)
from quorumlog.controller.topic_config import changed_settings, described, set_here
from quorumlog.log.config import TopicSettings
from quorumlog.transport.messages import (
    AdminReply,
    EndOffsetReply,
    EndOffsetRequest,
    Message,
    PositionReply,
    PositionRequest,
)

if TYPE_CHECKING:
    from quorumlog.actors.cluster.controller import ControllerActor

TRIM_APPLIED_WAIT_S = 5.0
TRIM_APPLIED_POLL_S = 0.02


def alterable(state: ClusterState, name: str, what: str) -> Topic:
    """The topic `name`, if `what` may be changed in it."""
    topic = state.topics.get(name)
    if topic is None:
        raise TopicError(f"unknown topic {name!r}")
    if name.startswith("__"):
        raise TopicError(f"the topic {name!r} is the cluster's own: its {what} cannot change")
    if name == DEFAULT_TOPIC and what != "settings":
        raise TopicError(
            f"the topic 'default' has one partition on every node: its {what} follow the cluster's membership"
        )
    return topic


async def alter(ctl: ControllerActor, args: dict[str, Any]) -> Message:
    """Settings (`config`: Kafka's names, None to unset; `replace`: AlterConfigs, every
    name not given unset), then the partition count, then the replication factor."""
    name = args["name"]
    result: dict[str, Any] = {"topic": name}
    if args.get("config") is not None:
        await _configure(ctl, name, args["config"], bool(args.get("replace")))
    if args.get("partitions") is not None:
        await _grow(ctl, name, args["partitions"])
    if args.get("replicas") is not None:
        result["moving"] = await _resize(ctl, name, args["replicas"])
    topic = ctl.state.topics[name]
    result.update(partitions=len(topic.partitions), replicas=topic.replication_factor)
    return AdminReply(result)


def configs(ctl: ControllerActor, names: list[str]) -> Message:
    """Each topic's settings in force, the names it sets itself, the node's own settings
    and its replication factor (Kafka's DescribeConfigs asks here, where the latest change
    is applied); None if unknown."""
    out: dict[str, dict | None] = {}
    log_config, append_bytes_max = ctl.node.storage.log_config, ctl.node.settings.append_bytes_max
    for name in names:
        topic = ctl.state.topics.get(name)
        out[name] = (
            None
            if topic is None
            else {
                "config": described(topic.settings, log_config, append_bytes_max),
                "set": sorted(set_here(topic.settings)),
                "node": described(TopicSettings(), log_config, append_bytes_max),
                "replication_factor": topic.replication_factor,
            }
        )
    return AdminReply({"topics": out})


async def _configure(ctl: ControllerActor, name: str, changes: dict, replace_all: bool) -> None:
    topic = alterable(ctl.state, name, "settings")
    if not isinstance(changes, dict):
        raise TopicError("config is a map of names to values")
    settings = changed_settings(topic.settings, changes, replace_all)
    if settings != topic.settings:
        why = await ctl.propose(AlterTopicConfig(name, settings.to_wire()))
        if why is not None:
            raise TopicError(why)


async def _grow(ctl: ControllerActor, name: str, partitions: int) -> None:
    """Up to `partitions`, placed and led as a create's (a retry finds them made)."""
    topic = alterable(ctl.state, name, "partitions")
    have = len(topic.partitions)
    if type(partitions) is not int or partitions < have:
        raise TopicError(
            f"topic {name!r} has {have} partitions: a topic grows, it never shrinks "
            f"(asked for {partitions})"
        )
    if partitions > PARTITIONS_MAX:
        raise TopicError(f"a topic has 1-{PARTITIONS_MAX} partitions, not {partitions}")
    factor = topic.replication_factor
    if partitions > have:
        live = await wait_live_brokers(ctl, factor)
        placed = place(partitions - have, factor, live, ctl.state.replica_sets())
        why = await ctl.propose(AddPartitions(name, have, tuple(placed)))
        now = ctl.state.topics.get(name)
        if why is not None and (now is None or len(now.partitions) != partitions):
            raise TopicError(why)
    await leaders_elected(ctl, name, partitions, factor)


async def _resize(ctl: ControllerActor, name: str, factor: int) -> int:
    """Every partition to `factor` replicas; how many partitions move."""
    topic = alterable(ctl.state, name, "replicas")
    if type(factor) is not int or factor < 1:
        raise TopicError(f"a partition has at least one replica, not {factor}")
    if factor > len(ctl.state.brokers):
        raise TopicError(
            f"{factor} replicas asked for but the cluster has {len(ctl.state.brokers)} nodes"
        )
    live = await wait_live_brokers(ctl, factor)
    sets = {p.partition: p.replicas for p in topic.partitions}
    leaders = {i: ctl.leader_hint(name, i) for i in sets}
    moves = resize(sets, factor, live, leaders, ctl.state.replica_sets())
    for partition, replicas in sorted(moves.items()):
        await _set_replicas(ctl, name, partition, replicas)
    return len(moves)


async def move(ctl: ControllerActor, args: dict[str, Any]) -> Message:
    """One partition onto the nodes `to`, its preferred leader first."""
    name, partition, to = args["topic"], args["partition"], args["to"]
    topic = alterable(ctl.state, name, "replicas")
    if type(partition) is not int or not 0 <= partition < len(topic.partitions):
        raise TopicError(
            f"topic {name!r} has no partition {partition} (it has {len(topic.partitions)})"
        )
    if not isinstance(to, list) or not to or any(type(n) is not int for n in to):
        raise TopicError("a move names one or more node ids")
    if len(set(to)) != len(to):
        raise TopicError(f"a node holds one replica of a partition: {to} repeats one")
    unknown = sorted(set(to) - set(ctl.state.brokers))
    if unknown:
        raise TopicError(
            f"no node {', '.join(map(str, unknown))} in the cluster "
            f"(nodes: {', '.join(map(str, sorted(ctl.state.brokers)))})"
        )
    if tuple(to) != topic.partitions[partition].replicas:
        await _set_replicas(ctl, name, partition, tuple(to))
    return AdminReply({"topic": name, "partition": partition, "replicas": to})


async def trim(ctl: ControllerActor, args: dict[str, Any]) -> Message:
    """A partition's readers start at `before` (-1: its committed end); the answer is its
    log start after, once the partition's leader applied it (or after
    TRIM_APPLIED_WAIT_S: the trim is committed, and every replica applies it). At most the
    end: a trim never drops what is not yet committed."""
    name, partition, before = args["topic"], args["partition"], args["before"]
    topic = ctl.state.topics.get(name)
    if topic is None or name.startswith("__"):
        raise TopicError(
            f"unknown topic {name!r}"
            if topic is None
            else f"the topic {name!r} is the cluster's own"
        )
    if type(partition) is not int or not 0 <= partition < len(topic.partitions):
        raise TopicError(
            f"topic {name!r} has no partition {partition} (it has {len(topic.partitions)})"
        )
    if type(before) is not int or before < -1:
        raise TopicError(f"trim before an offset or -1 (the end), not {before!r}")
    tp = (name, partition)
    reply = await ask_partition_leader(ctl.node, tp, EndOffsetRequest(True, *tp), EndOffsetReply)
    end = reply.commit_offset + 1
    if before == -1:
        before = end
    if before > end:
        raise TopicError(f"{name}/{partition} ends at {end}: it cannot be trimmed before {before}")
    # The state keeps the trim as a position in the partition's log, the same on every
    # replica (a record offset is the log's count: log/offsets.py).
    found = await ask_partition_leader(ctl.node, tp, PositionRequest(before, *tp), PositionReply)
    if found.position > topic.partitions[partition].log_start:
        why = await ctl.propose(TrimPartition(name, partition, found.position))
        if why is not None and ctl.state.partition(name, partition).log_start < found.position:
            raise TopicError(why)
    # Answered once the partition's leader applied it too: a reader asking it after the
    # answer is refused below the new start (the other replicas follow as they apply).
    with trio.move_on_after(TRIM_APPLIED_WAIT_S):
        while reply.log_start_offset < before:
            await trio.sleep(TRIM_APPLIED_POLL_S)
            reply = await ask_partition_leader(
                ctl.node, tp, EndOffsetRequest(False, *tp), EndOffsetReply
            )
    log_start = max(before, reply.log_start_offset)
    return AdminReply({"topic": name, "partition": partition, "log_start_offset": log_start})


async def _set_replicas(
    ctl: ControllerActor, name: str, partition: int, replicas: tuple[int, ...]
) -> None:
    why = await ctl.propose(SetReplicas(name, partition, replicas))
    if why is not None:
        raise TopicError(why)
    await rebalancer.give_way(ctl, f"{name}/{partition} placed by hand")


async def moves(ctl: ControllerActor) -> Message:
    """The partitions whose group is not yet on the replica set the state gives it: each
    with the members it has (`from`), the set it goes to, and how much of the leader's
    log the replicas that join hold (bytes, from their own account)."""
    state = ctl.state
    out = []
    for topic in sorted(state.topics.values(), key=lambda t: t.name):
        moved = [p for p in topic.partitions if state.was_moved(p)]
        if topic.name == DEFAULT_TOPIC or not moved:
            continue
        answers = await ask_nodes(ctl, sorted(state.brokers), topic.name)
        for p in moved:
            row = _move_row(topic.name, p.partition, p.replicas, answers)
            if row is not None:
                out.append(row)
    return AdminReply({"moves": out})


def _move_row(
    topic: str, partition: int, target: tuple[int, ...], answers: dict[int, dict]
) -> dict | None:
    seen = {n: a[str(partition)] for n, a in answers.items() if str(partition) in a}
    leading = [s for s in seen.values() if s["role"] == "leader"]
    leader = max(leading, key=lambda s: s["term"], default=None)
    config = (leader or {}).get("config") or {}
    members = sorted({*config.get("voters", []), *config.get("learners", [])})
    if leader is not None and members == sorted(target) and not config.get("joint"):
        return None  # there already
    total = leader["size_bytes"] if leader else 0
    joining = [n for n in target if n not in members]
    copied = {n: seen[n]["size_bytes"] if n in seen else 0 for n in joining}
    done = min((min(b, total) / total for b in copied.values()), default=1.0) if total else 1.0
    return {
        "topic": topic,
        "partition": partition,
        "from": members,
        "to": list(target),
        "leader_id": None if leader is None else leader["node_id"],
        "bytes_total": total,
        "bytes_copied": {str(n): b for n, b in copied.items()},
        "progress": round(done, 3),
    }
