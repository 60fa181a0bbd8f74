"""Queue mode's calls on a group's coordinator (actors/coordinator/coordinator.py): lease records to a
member, settle what members acked or released, expire leases, and move records delivered
`max_deliveries` times to the dead-letter topic `TOPIC.dlq`.

The coordinator reads the records it leases from their partition's leader and sends them
with the lease, so that it knows which offsets hold records (a trim may have taken some)
and a member needs one call per poll. Leases are decided and submitted under the group's
lock, and committed outside it: the next call decides while this one's lease commits,
leaving out the offsets of leases submitted and not yet applied (`Leasing`), so two
members are never handed the same record and the appends of many calls share a commit. A
call also carries the member's settlements since its last one, submitted before anything
new is leased.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from quorumlog.actors.cluster.leader_calls import OutOfRange, ask_partition_leader
from quorumlog.actors.coordinator.coordination import (
    LEASE_S_DEFAULT,
    Coordination,
    Leasing,
    member_id,
    membership,
)
from quorumlog.actors.coordinator.coordinator import Coordinator
from quorumlog.actors.coordinator.queue_reads import ReadAhead, holds, read_batches, records_at
from quorumlog.actors.replica.commands import Submitted
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.queue import Lease, RecordState, Settle, SharePartition
from quorumlog.consumers.state import Commit, Group, GroupError
from quorumlog.log.records import RawRecord, make_data_batch
from quorumlog.transport.messages import (
    Acks,
    AppendReply,
    AppendRequest,
)

LEASE_RECORDS_MAX = 5000
DELIVERIES_MAX = 100
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
    settles: list[tuple[list[Any], Submitted]] = []
    found: list[Found] = []
    try:
        async with c.lock(name):
            refused, settles = await _submit_settles(c, group, member, args.get("settle", ()))
            tps = co.partitions_of(group.topics)
            c.rotation = (c.rotation + 1) % max(len(tps), 1)
            for tp in tps[c.rotation :] + tps[: c.rotation]:
                if wanted <= 0:
                    break
                lease = await _lease_partition(
                    co, c, group, member, tp, wanted, deliveries_max, args.get("start") == "latest"
                )
                if lease is not None:
                    found.append(lease)
                    wanted -= len(lease.offsets)
        for settled, outcome in settles:
            why = await c.outcome(outcome)
            if why is not None:
                refused.append([*settled, why])
        for lease in found:
            why = await c.outcome(lease.submitted)
            if why is not None:
                c.leasing.pop((name, lease.tp), None)  # decide afresh from the window
                raise GroupError(why)
            c.note_leased(name, member, lease.tp, tuple(lease.offsets))
    finally:
        for lease in found:
            leasing = c.leasing.get((name, lease.tp))
            if leasing is not None:
                leasing.offsets.difference_update(lease.offsets)
    return {
        "leases": [[*lease.tp, lease.offsets, lease.blobs] for lease in found],
        "refused": refused,
    }


@dataclass(slots=True)
class Found:
    """A lease decided and submitted in one partition: its offsets, the data batches
    holding them, and its command on its way to commit."""

    tp: TopicPartition
    offsets: list[int]
    blobs: list[bytes]
    submitted: Submitted


def _positive(args: dict, key: str, most: int) -> int:
    value = args[key]
    if not isinstance(value, int) or not 0 < value <= most:
        raise GroupError(f"{key.replace('_', ' ')} is more than 0 and at most {most}")
    return value


async def _submit_settles(
    c: Coordination, group: Group, member: str, settlements: Any
) -> tuple[list[list[Any]], list[tuple[list[Any], Submitted]]]:
    """The member's acks and releases, one command per partition and outcome: those
    refused at once (a lease that ran out and went to another member, say) with why, and
    those submitted."""
    refused = []
    submitted = []
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
        settled = [topic, partition, outcome, list(offsets)]
        if why is None:
            command = Settle(group.name, topic, partition, member, offsets, outcome)
            submitted.append((settled, await c.submit(command)))
        else:
            refused.append([*settled, why])
    return refused, submitted


async def _lease_partition(
    co: Coordinator,
    c: Coordination,
    group: Group,
    member: str,
    tp: TopicPartition,
    wanted: int,
    deliveries_max: int,
    from_latest: bool,
) -> Found | None:
    """A lease in one partition, decided from the window and the leases submitted before
    it, and submitted."""
    window = group.queues.get(tp)
    if window is None and tp not in group.committed and from_latest:
        # Nothing consumed yet: the group starts at the end, as the member asked.
        _, end = await co.offsets_of(tp)
        await c.propose(Commit(group.name, member, ((*tp, end),)))
    window = group.queues.get(tp) or SharePartition(
        group.committed.get(tp, 0), group.committed.get(tp, 0)
    )
    await _dead_letters(co, c, group, tp, window, deliveries_max)
    leasing = c.leasing.setdefault((group.name, tp), Leasing(set(), window.next))
    blobs: dict[int, bytes] = {}  # base offset -> a data batch holding leased records
    offsets: list[int] = []
    for o in window.redeliverable(wanted + len(leasing.offsets), deliveries_max):
        if o in leasing.offsets or len(offsets) == wanted:
            continue
        if not holds(blobs, o):
            try:
                blobs.update((await read_batches(co, tp, o, 1, o + 1))[0])
            except OutOfRange:
                continue  # trimmed since it was leased: nothing to deliver again
        offsets.append(o)
    first = max(window.next, leasing.next)
    fresh = min(wanted - len(offsets), window.bound - first)
    if fresh > 0:
        ahead = c.read_ahead.get((group.name, tp))
        if ahead is None:
            ahead = c.read_ahead[(group.name, tp)] = ReadAhead(tp)
        if not ahead.covers(first):
            end = co.ends.get(tp, 0)
            if first >= end:
                _, end = await co.offsets_of(tp)
            if first < end:
                try:
                    read, reached = await read_batches(co, tp, first, fresh, min(end, window.bound))
                except OutOfRange:
                    # Trimmed (or retention) before the window's next: it skips what is gone.
                    # Never back: a log start at or below `first` (a replica's answer that
                    # crossed a leader change) leaves the read for the next lease.
                    start = (await co.offsets_of(tp))[0]
                    if start <= first:
                        read, reached = {}, first
                    else:
                        first = start
                        read, reached = await read_batches(
                            co, tp, first, fresh, min(end, window.bound)
                        )
                ahead.read_under_lock(first, read, reached)
        taken, fresh_offsets = ahead.take(first, fresh, window.bound)
        blobs.update(taken)
        offsets += fresh_offsets
        if ahead.wants_more():
            co.start_soon(ahead.fill, co)
    if not offsets:
        return None
    submitted = await c.submit(Lease(group.name, *tp, member, tuple(offsets)))
    leasing.offsets.update(offsets)
    leasing.next = max(leasing.next, offsets[-1] + 1)
    return Found(tp, offsets, list(blobs.values()), submitted)


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
        try:
            found = await records_at(co, tp, at)
        except OutOfRange:
            continue  # trimmed since: nothing to copy, it is settled as dead all the same
        for key, value, timestamp_ms, headers in found:
            why = [
                ("dlq.reason", f"delivered {window.records[at].deliveries} times".encode()),
                ("dlq.group", group.name.encode()),
                ("dlq.topic", tp[0].encode()),
                ("dlq.partition", str(tp[1]).encode()),
                ("dlq.offset", str(at).encode()),
            ]
            letters.append(RawRecord(key, value, timestamp_ms, [*(headers or []), *why]))
    if letters:
        batch = make_data_batch(letters)
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
