"""How client appends reach a group's mailbox (a mixin of `ReplicaActor`, whose mailbox,
core and stats it uses): checked first, the refusals answered at once; an append from the
transport without a task to wait for it (`take_append`), or with one (`append`, `submit`:
a full mailbox, the node's own appends). The group's main loop proposes them a round at a
time and answers them."""

from __future__ import annotations

from collections.abc import Callable

import trio

from quorumlog.actors.replica.append_check import checked_batches
from quorumlog.actors.replica.mailbox import Answered, ClientAppend, Pending
from quorumlog.actors.services.stats import NodeStats
from quorumlog.log.batch import BatchHeader
from quorumlog.raft.core import Proposal, RaftCore
from quorumlog.raft.settings import RaftSettings
from quorumlog.transport.messages import Acks, AppendReply, AppendRequest, ErrorReply, Message
from quorumlog.transport.network import Answer


class AppendIntake:
    core: RaftCore
    settings: RaftSettings
    stats: NodeStats
    _inbox: trio.MemorySendChannel[object]
    not_leader: Callable[[int | None], ErrorReply]
    reached_records: Callable[[], tuple[int, int, int]]

    def take_append(
        self, request: AppendRequest, answer: Answer, *, transactional: bool = False
    ) -> bool:
        """A client append, put in the mailbox without a task to wait for it: the main
        loop answers it through `answer`. False when the mailbox is full (the caller
        then waits for room through `append`). `transactional`: its batches may be a
        transaction's (its coordinator said the transaction is open)."""
        checked = self._checked(request, transactional=transactional)
        if not isinstance(checked, list):
            answer(checked)
            return True
        acks = request.acks
        size = len(request.batches)
        reply = Answered(answer, self.stats, acks, size, trio.current_time())
        proposal = Proposal(checked, acks is Acks.QUORUM)
        try:
            self._inbox.send_nowait(
                ClientAppend(proposal, acks, None if acks is Acks.NONE else reply)
            )
        except trio.WouldBlock:
            return False
        if acks is Acks.NONE:
            reply.resolve(self._received_reply())
        return True

    async def append(
        self, request: AppendRequest, *, by_client: bool = True, transactional: bool = False
    ) -> Message:
        """The waiting path of an append (the mailbox was full for `take_append`), and
        the node's own (`by_client=False`: the controller's commands, the coordinators'
        records), which the client metrics leave out."""
        started = trio.current_time()
        submitted = await self.submit(request, by_client, transactional)
        answer = await submitted.wait() if isinstance(submitted, Pending) else submitted
        if by_client and isinstance(answer, AppendReply):
            elapsed = trio.current_time() - started
            self.stats.append_done(request.acks.name.lower(), len(request.batches), elapsed)
        return answer

    async def submit(
        self, request: AppendRequest, by_client: bool = False, transactional: bool = False
    ) -> Pending | Message:
        """Put an append in the mailbox: appended in the order submitted; its answer when
        the Pending is resolved (acks=none: answered now), or the refusal. The node's own
        appends (not `by_client`) are answered in the log's positions, a client's in
        record offsets."""
        checked = self._checked(request, by_client, transactional)
        if not isinstance(checked, list):
            return checked
        proposal = Proposal(checked, request.acks is Acks.QUORUM)
        if request.acks is Acks.NONE:
            await self._inbox.send(ClientAppend(proposal, request.acks, None))
            return self._received_reply()
        reply = Pending()
        await self._inbox.send(ClientAppend(proposal, request.acks, reply, records=by_client))
        return reply

    def _checked(
        self, request: AppendRequest, by_client: bool = True, transactional: bool = False
    ) -> list[tuple[BatchHeader, memoryview]] | ErrorReply:
        core = self.core
        refusal = None if core.serves_clients else self.not_leader(core.leader_id)
        return checked_batches(
            request,
            self.settings.append_bytes_max,
            refusal,
            by_client,
            batch_bytes_max=self.log.config.max_message_bytes,
            keys_required=self.log.config.compacts,
            transactional=transactional,
        )

    def _received_reply(self) -> AppendReply:
        """The answer to an acks=none append: received, no offsets yet."""
        return AppendReply(None, None, *self.reached_records())
