"""The transaction coordinator: transactions' calls, answered by the leader of each
transactional id's partition of the internal topic `__transactions` (created by the first
call that needs it), over that partition's command log (transactions/state.py).

A producer's session (`init_producer`) gets the id's producer number (drawn for a new id)
and its next epoch, which fences the session before: a transaction that one left open is
aborted first, at the new epoch. `add_partitions` records the partitions a transaction
writes to before it writes there, and a partition's leader asks `verify` before it takes
a transaction's first batch (Kafka's KIP-890): a fenced producer, or one that never added
the partition, cannot leave a transaction no coordinator knows of, which would hold back
every read_committed reader of the partition for good. `end` commits a Prepare: from then
the transaction is decided, and its markers go to every partition (TxnMarkerRequest), by
this coordinator or, if it fails first, by the next, which finds it prepared; Complete
follows. A transaction open past its timeout is aborted at the next epoch, fencing its
producer, as Kafka's coordinator does.

Refusals name Kafka's errors (`TxnError.code`): the Kafka listener answers them as they are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import structlog
import trio

from quorumlog.actors.cluster.leader_calls import (
    ASK_S,
    OutOfRange,
    UnknownTopic,
    ask_partition_leader,
)
from quorumlog.actors.cluster.member import ClusterMember
from quorumlog.actors.coordinator.command_log import CommandLog, Machine, ask_leader, led
from quorumlog.actors.replica.commands import PassBack
from quorumlog.consumers.state import GROUPS_TOPIC
from quorumlog.log.transactions import producer_id
from quorumlog.transactions.state import (
    TIMEOUT_MS_MAX,
    TRANSACTIONS_PARTITIONS,
    TRANSACTIONS_TOPIC,
    AddPartitions,
    CommandError,
    Complete,
    Expire,
    InitProducer,
    Prepare,
    Snapshot,
    TransactionsState,
    Txn,
    TxnState,
    check_transactional_id,
    from_wire,
    next_producer,
    snapshot_of,
    to_wire,
    transactions_partition,
)
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import (
    AdminReply,
    AppendReply,
    ErrorCode,
    ErrorReply,
    GroupRequest,
    Message,
    TxnMarkerRequest,
    TxnRequest,
)

if TYPE_CHECKING:
    from quorumlog.actors.coordinator.coordinator import Coordinator

logger = structlog.get_logger("quorumlog.transactions")

TRANSACTIONS = Machine(
    new_state=lambda whole: TransactionsState(whole=whole),
    from_wire=from_wire,
    to_wire=to_wire,
    snapshot_of=snapshot_of,
    is_snapshot=lambda command: isinstance(command, Snapshot),
    errors=(CommandError,),
)

TICK_S = 0.2  # how often prepared transactions are finished and timed-out ones aborted
PRODUCER_NUMBER_BITS = 46  # as an idempotent producer's id (actors/kafka/produce.py)
# Kafka's transactional.id.expiration.ms: an id idle this long is forgotten.
ID_EXPIRY_MS = 7 * 24 * 3600 * 1000


class TxnHost(ClusterMember, Protocol):
    coordinator: Coordinator  # its `ensure_topic` makes `__transactions`
    wall_clock_ms: Callable[[], int]


class TxnError(Exception):
    """A refusal, with the name of Kafka's error for it (`producer_fenced`, ...)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


TxnCall = Callable[["TxnCoordinator", CommandLog, str, dict], Awaitable[dict[str, Any]]]


class TxnCoordinator:
    def __init__(self, node: TxnHost):
        self.node = node
        self.logs: dict[int, CommandLog] = {}
        self.locks: dict[str, trio.Lock] = {}  # one call at a time per transactional id

    # ------------------------------------------------------------------- running

    async def run(self) -> None:
        """Finishes the prepared transactions of the partitions led here, aborts those
        past their timeout, forgets idle ids, snapshots."""
        while True:
            await trio.sleep(TICK_S)
            for c in [c for c in self.logs.values() if c.is_current()]:
                try:
                    await self._tend(c)
                except (PassBack, TxnError) as exc:  # leadership moved, or a call won a race
                    logger.info("transactions_tick_refused", partition=c.partition, why=str(exc))

    async def _tend(self, c: CommandLog) -> None:
        now_ms = self.node_ms()
        state: TransactionsState = c.state
        for name, _ in state.timed_out(now_ms):
            async with self.lock(name):
                txn = state.ids.get(name)
                if txn is not None and (name, txn) in state.timed_out(self.node_ms()):
                    await self._fence(c, name, txn)
                    logger.info("transaction_timed_out", transactional_id=name, epoch=txn.epoch)
        for name, _ in state.preparing():
            async with self.lock(name):
                await self._finish(c, name)
        for name, txn in list(state.ids.items()):
            if txn.state.ended and now_ms - txn.updated_ms > ID_EXPIRY_MS:
                async with self.lock(name):
                    await c.propose(Expire(name, txn.number, txn.epoch))
        await c.snapshot_if_due(trio.current_time())

    def node_ms(self) -> int:
        return self.node.wall_clock_ms()

    def lock(self, name: str) -> trio.Lock:
        return self.locks.setdefault(name, trio.Lock())

    # ------------------------------------------------------------------- calls

    async def handle(self, request: TxnRequest) -> Message:
        if not self.node.is_member():
            return self.node.not_a_member()
        try:
            if request.op == "list":  # the ids this node's coordinators hold
                return AdminReply(await self.list_transactions(request.args))
            call = CALLS.get(request.op)
            if call is None:
                return ErrorReply(ErrorCode.REFUSED, f"unknown transaction call {request.op!r}")
            name = check_transactional_id(request.transactional_id)
            c = await self.current(await self.partition_of(name))
            return AdminReply(await call(self, c, name, request.args))
        except PassBack as answer:
            return answer.reply
        except TxnError as exc:
            return AdminReply({"error": exc.code, "message": str(exc)})
        except (KeyError, TypeError, ValueError) as exc:
            return ErrorReply(ErrorCode.REFUSED, f"{request.op} refused: bad arguments ({exc})")

    async def partition_of(self, name: str) -> int:
        topic = await self.node.coordinator.ensure_topic(
            TRANSACTIONS_TOPIC, TRANSACTIONS_PARTITIONS
        )
        return transactions_partition(name, len(topic.partitions))

    async def current(self, partition: int) -> CommandLog:
        """The command log of a `__transactions` partition this node leads, up to date;
        PassBack with the leader to ask otherwise."""
        return await led(
            self.node,
            TRANSACTIONS_TOPIC,
            partition,
            self.logs,
            lambda replica, p: CommandLog(replica, p, TRANSACTIONS),
        )

    async def ask_coordinator(self, name: str, request: TxnRequest) -> Message | None:
        """`request` answered by the coordinator of `name`, here or elsewhere."""
        partition = await self.partition_of(name)
        return await ask_leader(self.node, TRANSACTIONS_TOPIC, partition, request, self.handle)

    async def init_producer(self, c: CommandLog, name: str, args: dict) -> dict:
        """A session of the producer: the id's number and next epoch. A transaction left
        open by the session before is aborted first (at the new epoch: it is fenced)."""
        timeout_ms = int(args["timeout_ms"])
        if not 1 <= timeout_ms <= TIMEOUT_MS_MAX:
            raise TxnError(
                "invalid_transaction_timeout",
                f"transaction.timeout.ms is 1..{TIMEOUT_MS_MAX}, not {timeout_ms}",
            )
        expected = (int(args.get("number", -1)), int(args.get("epoch", -1)))
        async with self.lock(name):
            txn = c.state.ids.get(name)
            if expected[0] >= 0 and (txn is None or expected != txn.producer):
                raise TxnError(
                    "producer_fenced",
                    f"producer {expected} of {name!r} is not its current one: fenced",
                )
            if txn is not None and txn.state is TxnState.ONGOING:
                await self._fence(c, name, txn)
                logger.info("transaction_fenced", transactional_id=name, epoch=txn.epoch)
            if txn is not None and not await self._finish(c, name):
                raise TxnError(
                    "concurrent_transactions", f"{name!r}'s last transaction is ending: retry"
                )
            txn = c.state.ids.get(name)
            number, epoch = next_producer(txn, new_number(name, c))
            prior = (-1, -1) if txn is None else txn.producer
            why = await c.propose(
                InitProducer(name, number, epoch, timeout_ms, prior, self.node_ms())
            )
            if why is not None:
                raise TxnError("concurrent_transactions", why)
        return {"number": number, "epoch": epoch}

    async def add_partitions(self, c: CommandLog, name: str, args: dict) -> dict:
        """The open transaction (opened now if none is) writes to these partitions too."""
        partitions = tuple((str(t), int(p)) for t, p in args["partitions"])
        unknown = self._unknown(partitions)
        if unknown:
            raise TxnError("unknown_topic_or_partition", f"no partition {unknown[0]}")
        async with self.lock(name):
            txn = self._producers(c, name, args)
            if txn.state.preparing and not await self._finish(c, name):
                raise TxnError(
                    "concurrent_transactions", f"{name!r}'s last transaction is ending: retry"
                )
            txn = c.state.ids[name]
            if txn.state is TxnState.ONGOING and set(partitions) <= txn.partitions:
                return {}
            why = await c.propose(
                AddPartitions(name, txn.number, txn.epoch, partitions, self.node_ms())
            )
            if why is not None:
                raise TxnError("concurrent_transactions", why)
        return {}

    async def end(self, c: CommandLog, name: str, args: dict) -> dict:
        """Commit or abort the open transaction: decided once its Prepare commits; its
        markers are written before the answer when they can be (else by the next tick)."""
        commit = bool(args["commit"])
        async with self.lock(name):
            txn = self._producers(c, name, args)
            wanted = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if txn.state is wanted:  # a retry of the call that ended it
                return {}
            if txn.state.preparing:
                if (txn.state is TxnState.PREPARE_COMMIT) != commit:
                    raise TxnError("invalid_txn_state", f"{name!r} is ending the other way")
            elif txn.state is TxnState.ONGOING:
                why = await c.propose(Prepare(name, txn.number, txn.epoch, commit, self.node_ms()))
                if why is not None:
                    raise TxnError("invalid_txn_state", why)
            else:
                raise TxnError("invalid_txn_state", f"{name!r} has no open transaction")
            with trio.move_on_after(ASK_S):
                await self._finish(c, name)
        return {}

    async def verify(self, c: CommandLog, name: str, args: dict) -> dict:
        """Whether the producer's open transaction has the partition (a partition leader
        asks before it takes the transaction's first batch there)."""
        txn = self._producers(c, name, args)
        tp = (str(args["topic"]), int(args["partition"]))
        if txn.state is not TxnState.ONGOING or tp not in txn.partitions:
            raise TxnError(
                "invalid_txn_state", f"{name!r} has not added {tp[0]}/{tp[1]} to a transaction"
            )
        return {}

    async def describe(self, c: CommandLog, name: str, args: dict) -> dict:
        txn = c.state.ids.get(name)
        if txn is None:
            raise TxnError("transactional_id_not_found", f"unknown transactional id {name!r}")
        return describe(name, txn)

    async def list_transactions(self, args: dict) -> dict:
        """The transactional ids of the `__transactions` partitions led here."""
        ids = [
            describe(name, txn)
            for c in self.logs.values()
            if c.is_current()
            for name, txn in c.state.ids.items()
        ]
        return {"transactions": ids}

    # ------------------------------------------------------------------- the steps

    def _producers(self, c: CommandLog, name: str, args: dict) -> Txn:
        """The id's state, if the caller is its current producer (else why not)."""
        txn = c.state.ids.get(name)
        number, epoch = int(args["number"]), int(args["epoch"])
        if txn is None or txn.number != number:
            raise TxnError("invalid_producer_id_mapping", f"producer {number} is not {name!r}'s")
        if epoch != txn.epoch:
            raise TxnError("producer_fenced", f"epoch {epoch} of {name!r} is fenced by {txn.epoch}")
        return txn

    async def _fence(self, c: CommandLog, name: str, txn: Txn) -> None:
        """Abort the open transaction at the next epoch: its producer can no longer end
        it, nor write to it."""
        why = await c.propose(Prepare(name, txn.number, txn.epoch + 1, False, self.node_ms()))
        if why is not None:
            raise TxnError("concurrent_transactions", why)

    async def _finish(self, c: CommandLog, name: str) -> bool:
        """Write the markers of the prepared transaction of `name` (if it has one) to all
        of its partitions, then Complete; whether it is ended now."""
        txn = c.state.ids.get(name)
        if txn is None or not txn.state.preparing:
            return True
        commit = txn.state is TxnState.PREPARE_COMMIT
        marked = dict.fromkeys(sorted(txn.partitions), False)

        async def mark(tp: tuple[str, int]) -> None:
            marker = TxnMarkerRequest(producer_id(txn.number, txn.epoch), commit, c.term, *tp)
            try:
                if tp[0] == GROUPS_TOPIC:  # a group's positions: its coordinator's command
                    await self._end_offsets(tp[1], txn.number, commit)
                else:
                    await ask_partition_leader(self.node, tp, marker, AppendReply)
            except UnknownTopic:
                pass  # deleted since: nothing there to end
            except (PassBack, OutOfRange, ConnectionClosed) as exc:
                logger.info("transaction_marker_not_written", partition=tp, why=str(exc))
                return
            marked[tp] = True

        async with trio.open_nursery() as nursery:
            for tp in marked:
                nursery.start_soon(mark, tp)
        if not all(marked.values()):
            return False
        why = await c.propose(Complete(name, txn.number, txn.epoch, self.node_ms()))
        if why is not None:
            logger.info("transaction_complete_refused", transactional_id=name, why=why)
        return why is None

    async def _end_offsets(self, partition: int, number: int, commit: bool) -> None:
        """The marker of a `__groups` partition: EndTxnOffsets, by the groups' coordinator."""
        args = {"partition": partition, "producer": number, "commit": commit}
        request = GroupRequest("end_txn_offsets", "", args)
        reply = await self.node.coordinator.ask_coordinator(partition, request)
        if not isinstance(reply, AdminReply):
            raise PassBack(
                reply
                if isinstance(reply, ErrorReply)
                else ErrorReply(ErrorCode.BUSY, f"{GROUPS_TOPIC}/{partition} did not answer: retry")
            )

    def _unknown(self, partitions: tuple[tuple[str, int], ...]) -> list[tuple[str, int]]:
        topics = self.node.controller_actor.state.topics
        return [
            (t, p)
            for t, p in partitions
            if t not in topics or not 0 <= p < len(topics[t].partitions)
        ]


def new_number(name: str, c: CommandLog) -> int:
    """A producer number for a new id: from the id and where its partition's log is, so
    unique as a random draw would be (as an idempotent producer's id is), and the same
    in every replay of a simulation without drawing from the node's random numbers."""
    where = f"{name}/{c.partition}/{c.term}/{c.next_offset}".encode()
    digest = hashlib.blake2b(where, digest_size=8).digest()
    return int.from_bytes(digest) >> (64 - PRODUCER_NUMBER_BITS)


def describe(name: str, txn: Txn) -> dict:
    """An id as DescribeTransactions and `transactions` show it."""
    return {
        "transactional_id": name,
        "producer_id": txn.number,
        "producer_epoch": txn.epoch,
        "state": txn.state.value,
        "timeout_ms": txn.timeout_ms,
        "started_ms": txn.started_ms,
        "partitions": sorted(txn.partitions),
    }


CALLS: dict[str, TxnCall] = {
    "init_producer": TxnCoordinator.init_producer,
    "add_partitions": TxnCoordinator.add_partitions,
    "end": TxnCoordinator.end,
    "verify": TxnCoordinator.verify,
    "describe": TxnCoordinator.describe,
}
