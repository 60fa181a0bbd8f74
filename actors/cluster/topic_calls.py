"""The topic calls the controller's leader answers (actors/cluster/controller.py routes them here):
create (placed on the live brokers, appended with acks=quorum, answered once every
partition has a leader), delete (answered once no reachable node hosts a replica), list,
and describe (each partition as its replicas say now)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from quorumlog.actors.replica.commands import PassBack
from quorumlog.actors.services.storage import INTERNAL_TOPICS
from quorumlog.controller.commands import CreateTopic, DeleteTopic, added_settings
from quorumlog.controller.leaders import LeaderEntry
from quorumlog.controller.placement import place
from quorumlog.controller.state import (
    DEFAULT_TOPIC,
    TopicError,
    check_create,
    check_delete,
)
from quorumlog.controller.topic_config import changed_settings, described
from quorumlog.log.config import TopicSettings
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import (
    AdminReply,
    ErrorCode,
    ErrorReply,
    Message,
    PartitionsRequest,
    StatusReply,
)

if TYPE_CHECKING:
    from quorumlog.actors.cluster.controller import ControllerActor

# How long `describe_topic` waits for each replica's own account of itself.
DESCRIBE_ASK_S = 1.0
# How long a create waits on the leader table before it asks the replicas themselves.
ASK_LEADERS_AFTER_S = 1.0
# How often a delete asks the nodes whether they still host a replica.
DROPPED_POLL_S = 0.05


async def create(ctl: ControllerActor, args: dict[str, Any]) -> Message:
    name = args["name"]
    partitions = args.get("partitions", 1)
    replicas = args.get("replicas") or min(3, len(ctl.state.brokers))
    retention_bytes = args.get("retention_bytes")
    retention_ms = args.get("retention_ms")
    timestamp_type = args.get("timestamp_type", "create")
    given = TopicSettings(retention_bytes, retention_ms, timestamp_type)
    config = args.get("config") or {}
    if not isinstance(config, dict):
        raise TopicError("config is a map of setting names to values")
    settings = changed_settings(given, config)  # Kafka's names win
    if _made_already(ctl, args, name, partitions):
        return await leaders_elected(ctl, name, partitions, replicas)  # the first try made it
    internal = args.get("internal") is True and name in INTERNAL_TOPICS
    check_create(
        ctl.state,
        name,
        partitions,
        replicas,
        settings.retention_bytes,
        settings.retention_ms,
        settings.timestamp_type or "create",
        internal=internal,
    )
    live = await wait_live_brokers(ctl, replicas)
    placed = place(partitions, replicas, live, ctl.state.replica_sets())
    command = CreateTopic(
        name,
        tuple(placed),
        settings.retention_bytes,
        settings.retention_ms,
        settings.timestamp_type or "create",
        settings.segment_bytes_max,
        settings.max_message_bytes,
        ctl.new_topic_id(),
        added_settings(settings),
    )
    why = await ctl.propose(command)
    if why is not None and not _made_already(ctl, args, name, partitions):
        raise TopicError(why)
    return await leaders_elected(ctl, name, partitions, replicas)


def _made_already(ctl: ControllerActor, args: dict[str, Any], name: str, partitions: int) -> bool:
    """A retried create (or one of several made at once for an internal topic: the
    first uses of `__groups`) whose topic exists as asked: it is done, not refused."""
    existing = ctl.state.topics.get(name)
    return (
        bool(args.get("retry")) and existing is not None and len(existing.partitions) == partitions
    )


async def wait_live_brokers(ctl: ControllerActor, wanted: int) -> list[int]:
    """The brokers that answered this node's heartbeats (it leads the controller's
    group, so it beats all of them every interval) within LIVE_BEATS intervals: new
    replicas go only there, or a partition could be born without the majority it needs
    to elect. A new leader may not have heard from everyone yet: it waits up to two
    election timeouts for `wanted` of them, then says BUSY: a node may be starting or
    restarting, so the client asks again until its own timeout."""
    settings = ctl.node.settings
    with trio.move_on_after(2 * settings.election_timeout_max_s):
        while len(live := ctl.live_brokers()) < wanted:
            await trio.sleep(settings.heartbeat_interval_s)
        return live
    raise PassBack(
        ErrorReply(
            ErrorCode.BUSY,
            f"{wanted} replicas asked for but only {len(live)} of the cluster's "
            f"{len(ctl.state.brokers)} nodes answer now",
        )
    )


async def leaders_elected(
    ctl: ControllerActor, name: str, partitions: int, replicas: int
) -> Message:
    while any(ctl.leader_hint(name, p) is None for p in range(partitions)):
        with trio.move_on_after(ASK_LEADERS_AFTER_S):
            await ctl.changed.wait()
            continue
        await _ask_leaders(ctl, name)  # an update may have been lost on its way here
    return AdminReply({"topic": name, "partitions": partitions, "replicas": replicas})


async def _ask_leaders(ctl: ControllerActor, name: str) -> None:
    """Put in the table the leaders that the replicas of `name` report of themselves."""
    topic = ctl.state.topics.get(name)
    if topic is None:
        return
    nodes = sorted({n for p in topic.partitions for n in p.replicas})
    entries = [
        LeaderEntry(name, p, status["node_id"], status["term"], topic.partitions[p].created_offset)
        for answer in (await ask_nodes(ctl, nodes, name)).values()
        for partition, status in answer.items()
        if status["role"] == "leader" and (p := int(partition)) < len(topic.partitions)
    ]
    if ctl.leaders.merge(entries):
        ctl.signal()


async def delete(ctl: ControllerActor, args: dict[str, Any]) -> Message:
    name = args["name"]
    if args.get("retry") and name not in ctl.state.topics and name != DEFAULT_TOPIC:
        return AdminReply({"topic": name})  # the first try deleted it
    check_delete(ctl.state, name)
    why = await ctl.propose(DeleteTopic(name))
    if why is not None:
        raise TopicError(why)
    await _wait_dropped(ctl, name)
    return AdminReply({"topic": name})


async def _wait_dropped(ctl: ControllerActor, name: str) -> None:
    """Until no reachable node hosts a replica of the deleted topic, so that nothing
    appended after the answer lands in it (an unreachable one drops it when it hears)."""
    while True:
        answers = await ask_nodes(ctl, sorted(ctl.state.brokers), name)
        if not any(answers.values()):
            return
        await trio.sleep(DROPPED_POLL_S)


async def ask_nodes(ctl: ControllerActor, nodes: list[int], topic: str) -> dict[int, dict]:
    """Each node's account of its replicas of `topic` (those that answer in time)."""
    answers: dict[int, dict] = {}

    async def ask(node_id: int) -> None:
        if node_id == ctl.node.id:
            answers[node_id] = ctl.node.partitions_status(topic)
            return
        try:
            reply = await ctl.node.request(node_id, PartitionsRequest(topic))
        except ConnectionClosed:
            return
        if isinstance(reply, StatusReply):
            answers[node_id] = reply.status

    with trio.move_on_after(DESCRIBE_ASK_S):
        async with trio.open_nursery() as nursery:
            for node_id in nodes:
                nursery.start_soon(ask, node_id)
    return answers


def list_topics(ctl: ControllerActor) -> dict[str, list[int]]:
    return {
        t.name: [len(t.partitions), t.replication_factor]
        for t in sorted(ctl.state.topics.values(), key=lambda t: t.name)
    }


async def describe(ctl: ControllerActor, name: str) -> list[dict]:
    """Each partition as its replicas say (asked now), so the leader named is the one
    of the highest term any replica reports; the table where none answered."""
    topic = ctl.state.topics.get(name)
    if topic is None:
        raise TopicError(f"unknown topic {name!r}")
    nodes = sorted({n for p in topic.partitions for n in p.replicas})
    answers = await ask_nodes(ctl, nodes, name)
    config = described(
        topic.settings, ctl.node.storage.log_config, ctl.node.settings.append_bytes_max
    )
    out = []
    for p in topic.partitions:
        seen = [a[str(p.partition)] for a in answers.values() if str(p.partition) in a]
        leading = [s for s in seen if s["role"] == "leader"]
        best = max(leading or seen, key=lambda s: s["term"], default=None)
        entry = ctl.leaders.get(name, p.partition)
        out.append(
            {
                "topic": name,
                "partition": p.partition,
                "leader_id": best["node_id"] if leading else _believed(entry, p.replicas, seen),
                "replicas": list(p.replicas),
                "term": best["term"] if best else (entry.term if entry else 0),
                "commit_offset": max((s["commit_offset"] for s in seen), default=-1),
                "log_start_offset": best["log_start_offset"] if best else 0,
                "size_bytes": best["size_bytes"] if best else 0,
                "replica_status": _replica_status(p.replicas, seen, best if leading else None),
                "cleanup_policy": config["cleanup.policy"],
                "config": config,
            }
        )
        if best is not None and "cleaner" in best:
            out[-1]["cleaner"] = best["cleaner"]
    return out


def _believed(entry: LeaderEntry | None, replicas: tuple[int, ...], seen: list[dict]) -> int | None:
    """The table's leader, when no replica that answered leads: unless the answers rule it
    out (issue 45). It said it is not the leader, in its term or a later one; or those that
    answered without following it leave too few to make it a majority (its node down with
    one replica of two left, say): it could commit no append, and steps down as soon as
    check-quorum sees it."""
    if entry is None or entry.leader_id is None:
        return None
    by_node = {s["node_id"]: s for s in seen}
    own = by_node.get(entry.leader_id)
    if own is not None and own["term"] >= entry.term:
        return None  # it answered, and not as the leader
    could_follow = [
        n
        for n in replicas
        if (s := by_node.get(n)) is None
        or (s["leader_id"] == entry.leader_id and s["term"] == entry.term)
    ]
    if seen and len(could_follow) <= len(replicas) // 2:
        return None
    return entry.leader_id


def _replica_status(replicas: tuple[int, ...], seen: list[dict], leader: dict | None) -> list:
    """Each replica's own offsets and bytes, and its lag: the records the leader holds
    that it has not matched (as the leader saw it, else beside the furthest replica)."""
    by_node = {s["node_id"]: s for s in seen}
    followers = leader.get("followers", {}) if leader else {}
    end = leader["dirty_offset"] if leader else max((s["dirty_offset"] for s in seen), default=-1)
    out = []
    for node_id in replicas:
        s = by_node.get(node_id)
        if s is None:
            out.append({"node_id": node_id, "error": "unreachable"})
            continue
        follower = followers.get(str(node_id))
        matched = follower["match"] if follower else s["dirty_offset"]
        out.append(
            {
                "node_id": node_id,
                "role": s["role"],
                "dirty_offset": s["dirty_offset"],
                "flushed_offset": s["flushed_offset"],
                "commit_offset": s["commit_offset"],
                "size_bytes": s["size_bytes"],
                "lag": max(end - matched, 0),
            }
        )
    return out
