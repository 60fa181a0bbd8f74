"""A `__groups` partition whose state does not count records yet: quorumlog 0.4 kept the
consumer groups' offsets as log positions, which Raft's own batches took too. Before its
coordinator does anything else with such a partition it turns every offset the state holds
into the record offset it is, by each partition's own count (log/offsets.py), in one
command (`RecordOffsets`) that every replica applies alike. A new partition gets the same
command, with nothing to turn, as its first."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgpack
import structlog

from quorumlog.actors.cluster.leader_calls import UnknownTopic, ask_partition_leader
from quorumlog.actors.replica.commands import append_command
from quorumlog.consumers.state import RecordOffsets, held_offsets, to_wire
from quorumlog.log.offsets import OffsetTranslator
from quorumlog.transport.messages import OffsetMapReply, OffsetMapRequest

if TYPE_CHECKING:
    from quorumlog.actors.cluster.member import ClusterMember
    from quorumlog.actors.coordinator.coordination import Coordination

logger = structlog.get_logger("quorumlog.coordinator")


async def count_records(node: ClusterMember, c: Coordination) -> None:
    """Append RecordOffsets for `c`'s partition unless its state counts records already
    (PassBack when a partition's leader cannot be asked: the caller retries)."""
    async with c.counting:
        if c.state.records:
            return
        async with c.gate.alone():  # no other command in flight or let in meanwhile
            c.catch_up()
            if c.state.records:
                return
            turned = []
            for tp, offsets in sorted(held_offsets(c.state).items()):
                try:
                    ask = OffsetMapRequest(*tp)
                    reply = await ask_partition_leader(node, tp, ask, OffsetMapReply)
                except UnknownTopic:
                    continue  # deleted: its offsets are never read again
                translator = OffsetTranslator.from_wire(reply.offset_map)
                pairs = tuple((o, translator.records_before(o)) for o in sorted(offsets))
                turned.append((*tp, pairs))
            command = RecordOffsets(tuple(turned))
            await append_command(c.replica, msgpack.packb(to_wire(command), use_bin_type=True))
            c.catch_up()
        # What the coordinator kept by offset (queue mode's leases) counted positions.
        c.lease_deadlines.clear()
        c.leasing.clear()
        c.read_ahead.clear()
    if turned:
        logger.info("group_offsets_count_records", partition=c.partition, partitions=len(turned))
