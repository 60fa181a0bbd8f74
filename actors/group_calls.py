"""The consumer group calls a coordinator answers (actors/coordinator.py): each takes the
coordinator, the up-to-date coordination of the group's `__groups` partition, the group's
name and the call's arguments, and returns the reply's result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from actors.coordinator import (
    ASK_RETRY_S,
    ASK_S,
    Coordination,
    Coordinator,
    NotMember,
    Session,
    UnknownTopic,
    heartbeat_interval_s,
)
from actors.replicated import PassBack
from consumers.assignment import TopicPartition
from consumers.state import (
    GROUPS_TOPIC,
    Commit,
    Group,
    GroupError,
    ResetOffsets,
    check_member_settings,
)
from transport.messages import ErrorCode, ErrorReply, GroupRequest

MEMBER_ID_CHARS_MAX = 200
Result = dict[str, Any]


async def join(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """A member joins (or, retrying, finds itself joined): a new generation with it."""
    member = _member_id(args)
    mode = args.get("mode", "stream")
    session_ms = args["session_timeout_ms"]
    check_member_settings(mode, session_ms)
    topics = tuple(sorted(set(args["topics"])))
    if not topics or any(t.startswith("__") for t in topics):
        raise GroupError("a group consumes one or more topics of the cluster's users")
    co.partitions_of(topics)  # UnknownTopic if one is not there
    async with c.lock(name):
        group = c.state.groups.get(name) or Group(name, mode)
        if group.members and group.mode != mode:
            raise GroupError(f"group {name!r} is a {group.mode}-mode group")
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
    return _assignment(c, c.state.groups[name], member)


async def heartbeat(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """A member is alive and consumes `owned`; the answer says what it may consume now."""
    member = _member_id(args)
    group, session = _membership(c, name, member)
    session.last_seen = trio.current_time()
    session.owned = frozenset(_partitions(args.get("owned", ())))
    return _assignment(c, group, member)


async def leave(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    await co.remove_members(c, name, [_member_id(args)], "left")
    return {}


async def commit(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """A member's positions, durable (acks=quorum) once answered."""
    member = _member_id(args)
    offsets = tuple((str(t), int(p), int(o)) for t, p, o in args["offsets"])
    _, session = _membership(c, name, member)
    allowed = session.owned or frozenset()
    for topic, partition, offset in offsets:
        if (topic, partition) not in allowed:
            raise GroupError(f"member {member!r} does not consume {topic}/{partition}")
        if offset < 0:
            raise GroupError(f"offset {offset} of {topic}/{partition} is negative")
        if offset > co.ends.get((topic, partition), -1):
            _, end = await co.offsets_of((topic, partition))
            if offset > end:
                raise GroupError(f"offset {offset} of {topic}/{partition} is past its end ({end})")
    why = await c.propose(Commit(name, member, offsets))
    if why is not None:
        if member not in c.state.groups[name].members:
            raise NotMember(why)
        raise GroupError(why)
    return {}


async def describe(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    group = c.state.groups.get(name)
    if group is None:
        raise GroupError(f"unknown group {name!r}")
    rows = []
    tps = sorted(set(co.partitions_of(group.topics)) | set(group.committed))
    offsets = await _offsets_of_all(co, tps)
    sessions = c.sessions.get(name, {})
    for tp in tps:
        committed = group.committed.get(tp)
        end = offsets[tp][1]
        owner = next((m for m, s in sessions.items() if s.owned and tp in s.owned), None)
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed": committed,
                "end": end,
                "lag": None if committed is None else max(end - committed, 0),
                "owner": owner if group.mode == "stream" else None,
            }
        )
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
    members (they would consume from positions they no longer hold)."""
    topic, to = str(args["topic"]), args["to"]
    async with c.lock(name):
        group = c.state.groups.get(name)
        if group is not None and group.members:
            raise GroupError(
                f"group {name!r} has {len(group.members)} active member(s): stop them first"
            )
        offsets = await _offsets_of_all(co, co.partitions_of((topic,)))
        chosen = []
        for (_, partition), (start, end) in sorted(offsets.items()):
            if to == "earliest":
                offset = start
            elif to == "latest":
                offset = end
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


async def list_groups(co: Coordinator) -> list[dict[str, Any]]:
    """Every group of every `__groups` partition, from each partition's coordinator."""
    topic = co.node.controller_actor.state.topics.get(GROUPS_TOPIC)
    if topic is None:
        return []
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
    return sorted(found, key=lambda g: g["group"])


CALLS: dict[str, Callable[[Coordinator, Coordination, str, dict], Awaitable[Result]]] = {
    "join": join,
    "heartbeat": heartbeat,
    "leave": leave,
    "commit": commit,
    "describe": describe,
    "reset_offsets": reset_offsets,
}


# --- helpers -------------------------------------------------------------------------------


def _member_id(args: dict) -> str:
    member = args["member"]
    if not isinstance(member, str) or not 1 <= len(member) <= MEMBER_ID_CHARS_MAX:
        raise GroupError(f"a member id has 1-{MEMBER_ID_CHARS_MAX} characters")
    return member


def _membership(c: Coordination, name: str, member: str) -> tuple[Group, Session]:
    group = c.state.groups.get(name)
    session = c.sessions.get(name, {}).get(member)
    if group is None or member not in group.members or session is None:
        raise NotMember(f"member {member!r} is not in the group {name!r}: rejoin")
    return group, session


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


async def _offsets_of_all(
    co: Coordinator, tps: list[TopicPartition]
) -> dict[TopicPartition, tuple[int, int]]:
    found: dict[TopicPartition, tuple[int, int]] = {}
    errors: list[Exception] = []

    async def one(tp: TopicPartition) -> None:
        try:
            found[tp] = await co.offsets_of(tp)
        except (UnknownTopic, PassBack) as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for tp in tps:
            nursery.start_soon(one, tp)
    if errors:
        raise errors[0]
    return found
