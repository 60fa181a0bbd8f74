"""Queue mode's calls on a group's coordinator (actors/coordinator.py): lease records to a
member, settle what members acked or released, expire leases, and move records delivered
`max_deliveries` times to the dead-letter topic `TOPIC.dlq`.

The coordinator reads the records it leases from their partition's leader and sends them
with the lease, so that it knows which offsets are records (control batches are skipped)
and a member needs one call per poll. Leases are decided and appended under the group's
lock: two members are never handed the same record. A call also carries the member's
settlements since its last one, settled before anything new is leased.
"""

from __future__ import annotations

from typing import Any

import trio

from quorumlog.actors.coordination import (
    LEASE_S_DEFAULT,
    Coordination,
    member_id,
    membership,
)
from quorumlog.actors.coordinator import Coordinator
from quorumlog.actors.leader_calls import ask_partition_leader
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.queue import Lease, RecordState, Settle, SharePartition
from quorumlog.consumers.state import Commit, Group, GroupError
from quorumlog.log.batch import BatchType, parse_header, split_batches
from quorumlog.log.records import RawRecord, batch_records, make_data_batch
from quorumlog.transport.messages import (
    Acks,
    AppendReply,
    AppendRequest,
    ReadReply,
    ReadRequest,
)

LEASE_RECORDS_MAX = 5000
DELIVERIES_MAX = 100
READ_BYTES = 1024 * 1024
DLQ_SUFFIX = ".dlq"
MEMBER_OUTCOMES = ("ack", "release")


Result = dict[str, Any]


async def lease(co: Coordinator, c: Coordination, name: str, args: dict) -> Result:
    """Settle what the member sends, then lease it up to `max_records` records: per
    partition, [topic, partition, offsets, data batches holding them] (members decode only
    the leased records of the batches)."""
    member = member_id(args)
    group, session = membership(c, name, member)
    if group.mode != "queue":
        raise GroupError(f"group {name!r} is a {group.mode}-mode group")
    session.last_seen = trio.current_time()
    session.lease_timeout_s = _positive(args, "lease_timeout_ms", 3_600_000) / 1000
    deliveries_max = _positive(args, "max_deliveries", DELIVERIES_MAX)
    wanted = args["max_records"]  # 0: only settle
    if not isinstance(wanted, int) or not 0 <= wanted <= LEASE_RECORDS_MAX:
        raise GroupError(f"a lease takes 0-{LEASE_RECORDS_MAX} records")
    async with c.lock(name):
        refused = await _settle_all(c, group, member, args.get("settle", ()))
        leases = []
        tps = co.partitions_of(group.topics)
        c.rotation = (c.rotation + 1) % max(len(tps), 1)
        for tp in tps[c.rotation :] + tps[: c.rotation]:
            if wanted <= 0:
                break
            found = await _lease_partition(
                co, c, group, member, tp, wanted, deliveries_max, args.get("start") == "latest"
            )
            if found:
                offsets, blobs = found
                leases.append([*tp, offsets, blobs])
                wanted -= len(offsets)
    return {"leases": leases, "refused": refused}


def _positive(args: dict, key: str, most: int) -> int:
    value = args[key]
    if not isinstance(value, int) or not 0 < value <= most:
        raise GroupError(f"{key.replace('_', ' ')} is more than 0 and at most {most}")
    return value


async def _settle_all(
    c: Coordination, group: Group, member: str, settlements: Any
) -> list[list[Any]]:
    """The member's acks and releases, one command per partition and outcome; what was
    refused (a lease that ran out and went to another member, say), with why."""
    refused = []
    for topic, partition, outcome, offsets in settlements:
        if outcome not in MEMBER_OUTCOMES:
            raise GroupError(f"a member settles with {' or '.join(MEMBER_OUTCOMES)}")
        window = group.queues.get((topic, partition))
        offsets = tuple(int(o) for o in offsets)
        why = (
            f"{topic}/{partition} has no record in flight"
            if window is None
            else window.check_settle(member, offsets, outcome)
        )
        if why is None:
            why = await c.propose(Settle(group.name, topic, partition, member, offsets, outcome))
        if why is not None:
            refused.append([topic, partition, outcome, list(offsets), why])
    return refused


async def _lease_partition(
    co: Coordinator,
    c: Coordination,
    group: Group,
    member: str,
    tp: TopicPartition,
    wanted: int,
    deliveries_max: int,
    from_latest: bool,
) -> tuple[list[int], list[bytes]] | None:
    """Leases in one partition: the offsets, and the data batches holding them."""
    window = group.queues.get(tp)
    if window is None and tp not in group.committed and from_latest:
        # Nothing consumed yet: the group starts at the end, as the member asked.
        _, end = await co.offsets_of(tp)
        await c.propose(Commit(group.name, member, ((*tp, end),)))
    window = group.queues.get(tp) or SharePartition(
        group.committed.get(tp, 0), group.committed.get(tp, 0)
    )
    await _dead_letters(co, c, group, tp, window, deliveries_max)
    blobs: dict[int, bytes] = {}  # base offset -> a data batch holding leased records
    offsets: list[int] = []
    for o in window.redeliverable(wanted, deliveries_max):
        if not any(base <= o <= _last(blob) for base, blob in blobs.items()):
            blobs.update(await _read_batches(co, tp, o, 1, o + 1))
        offsets.append(o)
    fresh = min(wanted - len(offsets), window.bound - window.next)
    if fresh > 0:
        end = co.ends.get(tp, 0)
        if window.next >= end:
            _, end = await co.offsets_of(tp)
        if window.next < end:
            read = await _read_batches(co, tp, window.next, fresh, min(end, window.bound))
            blobs.update(read)
            offsets += _offsets_in(read, window.next, fresh, min(end, window.bound))
    if not offsets:
        return None
    why = await c.propose(Lease(group.name, *tp, member, tuple(offsets)))
    if why is not None:
        raise GroupError(why)
    c.note_leased(group.name, member, tp, tuple(offsets))
    return offsets, list(blobs.values())


async def _read_batches(
    co: Coordinator, tp: TopicPartition, offset: int, max_records: int, below: int
) -> dict[int, bytes]:
    """The data batches holding the first `max_records` records from `offset` on, below
    offset `below`, by base offset, as read: control batches are skipped and no record is
    decoded (a data batch's offsets are its records')."""
    out: dict[int, bytes] = {}
    count = 0
    while offset < below and count < max_records:
        reply = await ask_partition_leader(
            co.node, tp, ReadRequest(offset, READ_BYTES, *tp, leader_only=True), ReadReply
        )
        if not reply.batches:
            break
        for header, batch in split_batches(reply.batches):
            if count >= max_records or header.base_offset >= below:
                return out
            if header.batch_type is BatchType.DATA and header.last_offset >= offset:
                out[header.base_offset] = bytes(batch)
                count += min(header.last_offset, below - 1) + 1 - max(offset, header.base_offset)
            offset = max(offset, header.last_offset + 1)
    return out


def _last(blob: bytes) -> int:
    return parse_header(blob).last_offset


def _offsets_in(blobs: dict[int, bytes], offset: int, max_records: int, below: int) -> list[int]:
    """The first `max_records` record offsets the batches hold from `offset`, below `below`."""
    out: list[int] = []
    for base, blob in sorted(blobs.items()):
        first, last = max(base, offset), min(_last(blob), below - 1)
        out += range(first, last + 1)
    return out[:max_records]


async def _records_at(co: Coordinator, tp: TopicPartition, offset: int) -> list[RawRecord]:
    """The record at `offset`, decoded (for the dead-letter topic)."""
    out = []
    for blob in (await _read_batches(co, tp, offset, 1, offset + 1)).values():
        header = parse_header(blob)
        out += [
            r for i, r in enumerate(batch_records(blob, header)) if header.base_offset + i == offset
        ]
    return out


async def _dead_letters(
    co: Coordinator,
    c: Coordination,
    group: Group,
    tp: TopicPartition,
    window: SharePartition,
    deliveries_max: int,
) -> None:
    """Records delivered `deliveries_max` times and not acked go to `TOPIC.dlq`, with
    headers saying why and from where, then are settled as dead. A coordinator that fails
    between the two appends them again: the dead-letter topic is at least once."""
    exhausted = window.exhausted(deliveries_max)
    if not exhausted:
        return
    dlq = (tp[0] + DLQ_SUFFIX, 0)
    await co.ensure_topic(dlq[0])
    letters = []
    for at in exhausted:
        for key, value, timestamp_ms, headers in await _records_at(co, tp, at):
            why = [
                ("dlq.reason", f"delivered {window.records[at].deliveries} times".encode()),
                ("dlq.group", group.name.encode()),
                ("dlq.topic", tp[0].encode()),
                ("dlq.partition", str(tp[1]).encode()),
                ("dlq.offset", str(at).encode()),
            ]
            letters.append(RawRecord(key, value, timestamp_ms, [*(headers or []), *why]))
    if letters:
        batch = make_data_batch(letters, timestamp_ms=letters[0].timestamp_ms)
        append = AppendRequest(batch, Acks.QUORUM, -1, -1, *dlq)
        await ask_partition_leader(co.node, dlq, append, AppendReply)
    why = await c.propose(Settle(group.name, *tp, None, tuple(exhausted), "dead"))
    if why is not None:
        raise GroupError(why)


async def expire_leases(c: Coordination, now: float) -> None:
    """Hand back the leases that ran out. A lease this coordinator did not give (it took
    over since) runs for its holder's lease timeout from the first time it is seen here."""
    deadlines: dict[tuple[str, TopicPartition, int], float] = {}
    expired: dict[tuple[str, TopicPartition], list[int]] = {}
    for name, group in c.state.groups.items():
        for tp, window in group.queues.items():
            for o, record in window.records.items():
                if record.state is not RecordState.LEASED:
                    continue
                key = (name, tp, o)
                deadline = c.lease_deadlines.get(key)
                if deadline is None:
                    deadline = now + _lease_s(c, name, record.member)
                deadlines[key] = deadline
                if now > deadline:
                    expired.setdefault((name, tp), []).append(o)
    c.lease_deadlines = deadlines
    for (name, tp), offsets in expired.items():
        async with c.lock(name):  # a member may settle or renew meanwhile: look again
            window = c.state.groups[name].queues.get(tp)
            held = tuple(
                o
                for o in offsets
                if window is not None
                and (r := window.records.get(o)) is not None
                and r.state is RecordState.LEASED
                and c.lease_deadlines.get((name, tp, o), now) <= now
            )
            if held:
                await c.propose(Settle(name, *tp, None, held, "expire"))


def _lease_s(c: Coordination, name: str, member: str | None) -> float:
    session = c.sessions.get(name, {}).get(member or "")
    return session.lease_timeout_s if session is not None else LEASE_S_DEFAULT
