"""The consumer group calls a coordinator answers (actors/coordinator/coordinator.py): each takes the
coordinator, the up-to-date coordination of the group's `__groups` partition, the group's
name and the call's arguments, and returns the reply's result."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from quorumlog.actors.cluster.leader_calls import (
    ASK_RETRY_S,
    ASK_S,
    UnknownTopic,
    ask_partition_leader,
)
from quorumlog.actors.coordinator import queue_calls
from quorumlog.actors.coordinator.coordination import (
    Coordination,
    NotMember,
    Session,
    heartbeat_interval_s,
    member_id,
    membership,
)
from quorumlog.actors.coordinator.coordinator import Calls, Coordinator, partition_ends
from quorumlog.actors.replica.commands import PassBack
from quorumlog.actors.replica.read_index import end_offset
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.state import (
    GROUPS_TOPIC,
    Commit,
    DeleteGroup,
    EndTxnOffsets,
    Group,
    GroupError,
    ResetOffsets,
    check_member_settings,
)
from quorumlog.transport.messages import (
    EndOffsetReply,
    ErrorCode,
    ErrorReply,
    GroupRequest,
    OffsetForTimeReply,
    OffsetForTimeRequest,
)

Result = dict[str, Any]
T = TypeVar("T")


async def join(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """A member joins (or, retrying, finds itself joined): a new generation with it."""
    member = member_id(args)
    mode = args.get("mode", "stream")
    session_ms = args["session_timeout_ms"]
    check_member_settings(mode, session_ms)
    topics = tuple(sorted(set(args["topics"])))
    if not topics or any(t.startswith("__") for t in topics):
        raise GroupError("a group consumes one or more topics of the cluster's users")
    co.partitions_of(topics)  # UnknownTopic if one is not there
    async with c.lock(name):
        group = c.state.groups.get(name) or Group(name, mode)
        if group.mode != mode:  # its positions mean something else in the other mode
            raise GroupError(
                f"group {name!r} is a {group.mode}-mode group: join it in {group.mode} mode, "
                f"or delete it first (`quorumlog group delete {name}`)"
            )
        if group.members and group.topics != topics:
            raise GroupError(
                f"group {name!r} consumes {', '.join(group.topics)}: join with the same topics"
            )
        if member not in group.members:
            members = {**group.members, member: session_ms}
            await co.set_members(c, group, mode, topics, members)
            c.sessions.setdefault(name, {})[member] = Session(
                trio.current_time(), session_ms / 1000, frozenset()
            )
    _note_lease_timeout(c.sessions[name][member], args)
    return _assignment(c, c.state.groups[name], member)


async def heartbeat(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """A member is alive and consumes `owned`; the answer says what it may consume now."""
    member = member_id(args)
    group, session = membership(c, name, member)
    session.last_seen = trio.current_time()
    session.owned = frozenset(_partitions(args.get("owned", ())))
    _note_lease_timeout(session, args)
    return _assignment(c, group, member)


async def leave(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    await co.remove_members(c, name, [member_id(args)], "left")
    return {}


async def commit(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """A member's positions, durable (acks=quorum) once answered."""
    member = member_id(args)
    offsets = tuple((str(t), int(p), int(o)) for t, p, o in args["offsets"])
    group, session = membership(c, name, member)
    for topic, partition, offset in offsets:
        if not _may_commit(c, group, member, session, (topic, partition)):
            raise GroupError(f"member {member!r} does not consume {topic}/{partition}")
        if offset < 0:
            raise GroupError(f"offset {offset} of {topic}/{partition} is negative")
        if offset > co.ends.get((topic, partition), -1):
            _, end = await co.offsets_of((topic, partition))
            if offset > end:  # the replica asked may lag: ask the leader for sure
                _, end = await co.offsets_of((topic, partition), exact=True)
            if offset > end:
                raise GroupError(f"offset {offset} of {topic}/{partition} is past its end ({end})")
    why = await c.propose(Commit(name, member, offsets))
    if why is not None:
        if member not in c.state.groups[name].members:
            raise NotMember(why)
        raise GroupError(why)
    return {}


async def describe(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    # A read: confirm with a quorum that this coordinator still leads (ReadIndex), or a
    # deposed one could show positions older than its successor showed already.
    confirmed = await end_offset(c.replica, True)
    if not isinstance(confirmed, EndOffsetReply):
        raise PassBack(confirmed)
    c.catch_up()
    group = c.state.groups.get(name)
    if group is None:
        raise GroupError(f"unknown group {name!r}")
    rows = []
    # Topics deleted since (their positions leave soon: ForgetTopics) are not shown.
    known = co.node.controller_actor.state.topics
    subscribed = co.partitions_existing(group.topics)
    tps = sorted(set(subscribed) | {tp for tp in group.committed if tp[0] in known})
    offsets = await _for_each(tps, co.offsets_of)
    sessions = c.sessions.get(name, {})
    for tp in tps:
        committed = group.committed.get(tp)
        next_offset = offsets[tp][1]
        owner = next((m for m, s in sessions.items() if s.owned and tp in s.owned), None)
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed": committed,
                **partition_ends(next_offset),
                "lag": None if committed is None else max(next_offset - committed, 0),
                "owner": owner if group.mode == "stream" else None,
            }
        )
        if group.mode == "queue":  # the records leased to members and not settled yet
            window = group.queues.get(tp)
            rows[-1]["leased"] = window.leased_count() if window is not None else 0
    return {
        "group": name,
        "mode": group.mode,
        "generation": group.generation,
        "topics": list(group.topics),
        "members": [
            {"member": m, "session_timeout_ms": ms, "partitions": group.assignment.get(m, ())}
            for m, ms in sorted(group.members.items())
        ],
        "partitions": rows,
    }


async def reset_offsets(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """An operator's positions for every partition of a topic: refused while the group has
    members (they would consume from positions they no longer hold). `to` is "earliest",
    "latest", an offset, or {"time_ms": T}: each partition's first record stamped at or
    after T (its end where none is)."""
    topic, to = str(args["topic"]), args["to"]
    async with c.lock(name):
        _inactive(c, name)
        tps = co.partitions_of((topic,))
        offsets = await _for_each(tps, co.offsets_of)
        if isinstance(to, dict):
            if not isinstance(to.get("time_ms"), int):
                raise GroupError(f"a time to reset to is milliseconds, not {to!r}")
            times = await _for_each(tps, functools.partial(_offset_for_time, co, to["time_ms"]))
        chosen = []
        for (_, partition), (start, end) in sorted(offsets.items()):
            if to == "earliest":
                offset = start
            elif to == "latest":
                offset = end
            elif isinstance(to, dict):
                offset = times[(topic, partition)]
            elif isinstance(to, int) and start <= to <= end:
                offset = to
            else:
                raise GroupError(
                    f"reset to earliest, latest or an offset within every partition "
                    f"({topic}/{partition} holds {start}-{end}), not {to!r}"
                )
            chosen.append((topic, partition, offset))
        why = await c.propose(ResetOffsets(name, tuple(chosen)))
        if why is not None:
            raise GroupError(why)
    return {"offsets": chosen}


async def delete(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """An operator removes a group and its positions: refused while it has members."""
    async with c.lock(name):
        _inactive(c, name)
        kafka_members = co.node.kafka_members(name)
        if kafka_members:
            raise GroupError(
                f"group {name!r} has {kafka_members} active Kafka member(s): stop them first"
            )
        why = await c.propose(DeleteGroup(name))
        if why is not None:
            raise GroupError(why)
    return {"group": name}


def _inactive(c: Coordination, name: str) -> Group:
    """The group `name`, if it exists and no member is active in it."""
    group = c.state.groups.get(name)
    if group is None:
        raise GroupError(f"unknown group {name!r}")
    if group.members:
        raise GroupError(
            f"group {name!r} has {len(group.members)} active member(s): stop them first"
        )
    return group


async def list_groups(co: Coordinator, args: dict) -> Result:
    """Every group of every `__groups` partition, from each partition's coordinator."""
    topic = co.node.controller_actor.state.topics.get(GROUPS_TOPIC)
    if topic is None:
        return {"groups": []}
    found: list[dict[str, Any]] = []
    silent: list[int] = []

    async def ask(partition: int) -> None:
        request = GroupRequest("list_here", "", {"partition": partition})
        with trio.move_on_after(ASK_S):
            while True:
                reply = await co.ask_coordinator(partition, request)
                if reply is not None and not isinstance(reply, ErrorReply):
                    found.extend(reply.result["groups"])
                    return
                await trio.sleep(ASK_RETRY_S)
        silent.append(partition)

    async with trio.open_nursery() as nursery:
        for partition in range(len(topic.partitions)):
            nursery.start_soon(ask, partition)
    if silent:
        raise PassBack(
            ErrorReply(
                ErrorCode.BUSY, f"{GROUPS_TOPIC}/{min(silent)} has no coordinator now: retry"
            )
        )
    return {"groups": sorted(found, key=lambda g: g["group"])}


async def list_here(co: Coordinator, args: dict) -> Result:
    """The groups of one `__groups` partition, from its coordinator."""
    c = await co.current(int(args["partition"]))
    groups = c.state.groups.values()
    return {
        "groups": [{"group": g.name, "mode": g.mode, "members": len(g.members)} for g in groups]
    }


async def end_txn_offsets(co: Coordinator, args: dict) -> Result:
    """A transaction's marker for one `__groups` partition, from its coordinator: the
    positions the transaction committed there (TxnOffsets) count now, or go."""
    c = await co.current(int(args["partition"]))
    await c.propose(EndTxnOffsets(int(args["producer"]), bool(args["commit"])))
    return {}


CALLS = Calls(
    group={
        "join": join,
        "heartbeat": heartbeat,
        "leave": leave,
        "commit": commit,
        "describe": describe,
        "reset_offsets": reset_offsets,
        "delete": delete,
        "lease": queue_calls.lease,
    },
    node={"list": list_groups, "list_here": list_here, "end_txn_offsets": end_txn_offsets},
    tick=queue_calls.expire_leases,
)


# --- helpers -------------------------------------------------------------------------------


def _may_commit(
    c: Coordination, group: Group, member: str, session: Session, tp: TopicPartition
) -> bool:
    """What the member said it consumes; or, before it said anything to this coordinator
    (a new one), what no other member says it consumes."""
    if session.owned is not None:
        return tp in session.owned
    others = c.sessions.get(group.name, {})
    return not any(s.owned and tp in s.owned for m, s in others.items() if m != member)


def _note_lease_timeout(session: Session, args: dict) -> None:
    """Queue mode: how long this member's leases last (a new coordinator learns it from the
    member's next call)."""
    if "lease_timeout_ms" in args:
        session.lease_timeout_s = int(args["lease_timeout_ms"]) / 1000


def _partitions(items) -> list[TopicPartition]:
    return [(str(t), int(p)) for t, p in items]


def _granted(c: Coordination, group: Group, member: str) -> list[TopicPartition]:
    return [tp for tp in group.assignment.get(member, ()) if c.free_for(group, member, tp)]


def _assignment(c: Coordination, group: Group, member: str) -> Result:
    """What a member should consume (its target) and may consume now (granted, with the
    committed position of each)."""
    session = c.sessions[group.name][member]
    granted = _granted(c, group, member)
    # Granted is as good as consumed: nobody else is let in until the member says it gave
    # the partition up (its reports name what it consumes and what it was granted).
    session.owned = (session.owned or frozenset()) | set(granted)
    return {
        "member": member,
        "generation": group.generation,
        "target": [list(tp) for tp in group.assignment.get(member, ())],
        "granted": [[t, p, group.committed.get((t, p))] for t, p in granted],
        "heartbeat_interval_s": heartbeat_interval_s(session.timeout_s),
    }


async def _offset_for_time(co: Coordinator, timestamp_ms: int, tp: TopicPartition) -> int:
    """The first offset of `tp` stamped at or after the time, or its end, as its leader
    says once its commit offset covers every acknowledged append (leader_only)."""
    ask = OffsetForTimeRequest(timestamp_ms, *tp, leader_only=True)
    reply = await ask_partition_leader(co.node, tp, ask, OffsetForTimeReply)
    return reply.commit_offset + 1 if reply.offset is None else reply.offset


async def _for_each(
    tps: list[TopicPartition], ask: Callable[[TopicPartition], Awaitable[T]]
) -> dict[TopicPartition, T]:
    """`ask` about every partition at once."""
    found: dict[TopicPartition, T] = {}
    errors: list[Exception] = []

    async def one(tp: TopicPartition) -> None:
        try:
            found[tp] = await ask(tp)
        except (UnknownTopic, PassBack) as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for tp in tps:
            nursery.start_soon(one, tp)
    if errors:
        raise errors[0]
    return found
