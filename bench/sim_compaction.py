"""The simulation's compacted topics: clients write keyed records, every node's cleaner runs
as the faults go on and once more after they healed, and each replica's log must then be
what the cleaner may leave of the committed log (docs/reliability.md, I10):

- I10a: a record a replica holds is the record committed at its offset: two replicas never
  hold different records at one offset, and a client's value is at one offset only.
- I10b: no key's latest committed record is lost: where a quorum-acknowledged record has no
  later record of its key in any replica, every replica that committed that far and whose
  log reaches back that far holds it at its offset.
- I10c: the reference model: below where its cleaner's last pass ended, a replica holds at
  most one record per key.

The batch-level checks of other groups (I1-I3: every acknowledged record where it was
acknowledged, batches alike on every replica) do not hold here by design: a replica that
cleaned further holds fewer records, in other batches, at the same offsets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quorumlog.log.batch import BatchType, split_batches
from quorumlog.log.records import RawRecord, offset_records
from quorumlog.transport.messages import Acks

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor
    from quorumlog.bench.sim_cluster import Cluster, Outcome

# The compacted topics' settings: a pass as soon as anything is dirty.
COMPACT_CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
KEYS = 4  # few keys, many records each: most records are replaced


async def create_compacted_topic(cluster: Cluster) -> None:
    """A compacted topic of two partitions, which the clients then write to alone."""
    await cluster.create_topic("kv", 2, timeout_s=5.0, config=COMPACT_CONFIG)
    cluster.routes = [("kv", 0), ("kv", 1)]
    cluster.trace.append("created kv")


async def clean_everywhere(cluster: Cluster) -> None:
    """One more pass over every compacted log of every running node."""
    for sim in cluster.nodes.values():
        if sim.node is not None:
            await sim.node.cleaner.clean_all()


def held_records(replica: ReplicaActor) -> dict[int, tuple[int, RawRecord]]:
    """Record offset -> (position, record) of every committed data record it holds."""
    log = replica.log
    out: dict[int, tuple[int, RawRecord]] = {}
    position = log.log_start_offset
    commit = replica.core.commit_offset
    while position <= commit:
        chunk = log.read(position, 1 << 20, upto_offset=commit)
        for header, batch in split_batches(chunk.data):
            if header.batch_type is BatchType.DATA:
                for at, record in offset_records(batch, header):
                    out[log.records_before(at)] = (at, record)
        position = chunk.last_offset + 1
    return out


def covers(replica: ReplicaActor, offset: int) -> bool:
    """Whether the replica's committed log holds record `offset`'s place: it reaches back
    that far (a witness's starts where it joined: raft/witness.py) and has committed that
    far (a learner still catching up, or a replica on its way out, may not)."""
    log = replica.log
    return (
        log.records_before(log.log_start_offset)
        <= offset
        < log.records_before(replica.core.commit_offset + 1)
    )


def check_compacted_group(
    cluster: Cluster, gid: int, outcomes: list[Outcome], problems: list[str]
) -> None:
    replicas = cluster.replicas(gid)
    held = {i: held_records(r) for i, r in replicas.items()}
    merged: dict[int, RawRecord] = {}
    for i, records in held.items():
        for offset, (_, record) in records.items():
            if merged.setdefault(offset, record) != record:
                problems.append(f"I10a: node {i} of group {gid} holds another record at {offset}")
                return
    where: dict[bytes, list[int]] = {}
    for offset, record in merged.items():
        where.setdefault(record.value, []).append(offset)
    latest: dict[bytes, int] = {}
    for offset, record in sorted(merged.items()):
        latest[record.key] = offset
    for outcome in outcomes:
        placed = where.get(outcome.value)
        if placed is not None and placed != [outcome.offset] and outcome.offset is not None:
            problems.append(
                f"I10a: {outcome.value!r} acknowledged at {outcome.offset}, at {placed}"
            )
        acked = outcome.acks is Acks.QUORUM and outcome.offset is not None
        if acked and latest.get(outcome.key, -1) <= outcome.offset:
            missing = [
                i
                for i, records in held.items()
                if outcome.offset not in records and covers(replicas[i], outcome.offset)
            ]
            if missing:
                problems.append(
                    f"I10b: {outcome.value!r}, the latest of {outcome.key!r} in group {gid} "
                    f"at {outcome.offset}, is not on nodes {missing}"
                )
    for i, replica in replicas.items():
        cleaned = [r.key for at, r in held[i].values() if at < replica.log.cleaned_to]
        if len(cleaned) != len(set(cleaned)):
            problems.append(
                f"I10c: node {i} holds a key twice in the part of group {gid} it cleaned"
            )
