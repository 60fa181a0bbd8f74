"""What the state machines kept in a group's log share (the controller's cluster state,
the coordinator's consumer groups): append a command with acks=quorum, and read the
committed batches to apply them in log order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from quorumlog.actors.replica.mailbox import Pending
from quorumlog.log.batch import SNAPSHOT, BatchHeader, split_batches
from quorumlog.log.records import make_data_batch
from quorumlog.transport.messages import Acks, AppendReply, AppendRequest, Message

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor

READ_BYTES_MAX = 1024 * 1024
Submitted = Pending | Message  # the answer to come, or a refusal


class PassBack(Exception):
    """A reply to pass back to the caller as it is (leadership moved, say)."""

    def __init__(self, reply: Message):
        super().__init__(str(reply))
        self.reply = reply


def not_leader(group: ReplicaActor) -> PassBack:
    return PassBack(group.not_leader(group.view.leader_id))


async def append_command(group: ReplicaActor, value: bytes, snapshot: bool = False) -> int:
    """Append one command with acks=quorum; its offset once committed (PassBack if the
    group's leader could not take it). A `snapshot` holds the whole state (compaction)."""
    return await committed(await submit_command(group, value, snapshot))


async def submit_command(group: ReplicaActor, value: bytes, snapshot: bool = False) -> Submitted:
    """Put one command in the group's mailbox: appended after those submitted before it
    (`committed` waits for it), so a caller may decide the next before this one commits."""
    batch = make_data_batch(
        [(None, value, 0, None)],
        compress=snapshot,
        flags=SNAPSHOT if snapshot else 0,
    )
    return await group.submit(AppendRequest(batch, Acks.QUORUM, -1, -1))


async def committed(submitted: Submitted) -> int:
    """The offset of a submitted command once committed (PassBack if it was not)."""
    reply = await submitted.wait() if isinstance(submitted, Pending) else submitted
    if not isinstance(reply, AppendReply) or reply.last_offset is None:
        raise PassBack(reply)
    return reply.last_offset


def committed_batches(group: ReplicaActor, offset: int) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The group's committed batches from `offset` (or its log's start) on, in order: the
    next offset to apply is the commit offset + 1 once they are (no await in between)."""
    commit, log = group.view.commit_offset, group.log
    offset = max(offset, log.log_start_offset)
    while offset <= commit:
        chunk = log.read(offset, READ_BYTES_MAX, upto_offset=commit)
        yield from split_batches(chunk.data)
        offset = chunk.last_offset + 1
