"""Appends to one partition that come while earlier ones are on their way ride together, as
a Kafka producer's do (with linger.ms 0): an append is sent while fewer than IN_FLIGHT
requests to its partition are under way, after one pass of the scheduler in which the
appends made at the same moment (the tasks an answer woke) join it. One that comes when
they all are waits, and as soon as one is answered, every append waiting (up to a batch's
size) goes as one batch, sent by the first of them. A lone append is never held back
beyond that one pass, but for one case, Nagle's rule with "a request of several calls" for
"a full segment": an append that would go alone while a request of several calls is on its
way waits for that one to be answered (once: then it goes, alone or not), and goes with the
calls its callers make then. (In a closed loop of 64 calls, the one or two answered a round
later than the rest otherwise went alone each round, a third of all requests: 16 in flight
x1.4, 64 x1.3.)

Each call keeps what it had alone: its records contiguous and atomic in the log (a batch
is written whole or not at all), its own offsets, its own error, and a deadline no later
than its own. A call whose deadline ends while it waits is taken out; one whose batch is
on its way has that batch's outcome, and a rider whose sender gave up learns that its
outcome is unknown. A call that joins one about to send takes no deadline of its own
(entering one is the largest cost of such a call): it ends with its sender, whose
deadline, in a client where every call has the same timeout, ends first.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from contextlib import AbstractContextManager

import trio

from quorumlog.client.errors import OutcomeUnknownError
from quorumlog.client.protocol import BATCH_BYTES_MAX, Prepared
from quorumlog.transport.messages import AppendReply

# Requests per partition under way before appends start to ride together: 2 did best on
# this 2-core machine (1 KiB records, 64 calls in flight: 1 record per call x1.7 the rate
# without riding, 64 per call x1.1; 1 and 4 each lose one of the two).
IN_FLIGHT = 2

Send = Callable[[list[Prepared]], Awaitable[list[AppendReply]]]


class _Call:
    __slots__ = (
        "error",
        "held",
        "ready",
        "records",
        "replies",
        "riders",
        "sends",
        "size",
        "taken",
    )

    def __init__(self, records: list[Prepared]):
        self.records = records
        self.size = sum([r.size for r in records])
        self.ready = trio.Event()  # answered, or its turn to send
        self.sends = False
        self.riders: list[_Call] = []  # those it sends with its own, when it sends
        self.taken = False  # in a batch on its way
        # Sends when its turn comes, even alone: it waited for a request of several once
        # already (so never twice), or it is a rider handed back, outside any deadline.
        self.held = False
        self.replies: list[AppendReply] = []
        self.error: Exception | None = None

    def outcome(self) -> list[AppendReply]:
        if self.error is not None:
            raise self.error
        return self.replies


class _Lane:
    """One partition and acks level: requests under way, the call about to send (others
    made meanwhile ride with it), and the calls waiting (only while IN_FLIGHT requests are
    under way)."""

    __slots__ = ("calls_in_flight", "gathered_bytes", "gathering", "in_flight", "waiting")

    def __init__(self) -> None:
        self.in_flight = 0
        self.calls_in_flight = 0  # in the requests under way
        self.gathering: _Call | None = None
        self.gathered_bytes = 0
        self.waiting: deque[_Call] = deque()

    def gather(self, call: _Call) -> None:
        """`call` (with no riders yet) holds a request slot and sends next: calls made
        until it does ride."""
        call.sends = True
        self.gathering = call
        self.gathered_bytes = call.size

    def join(self, call: _Call) -> bool:
        """Whether `call` rides with the call about to send."""
        first = self.gathering
        if first is None or self.gathered_bytes + call.size > BATCH_BYTES_MAX:
            return False
        call.taken = True
        first.riders.append(call)
        self.gathered_bytes += call.size
        return True


class Batcher:
    def __init__(self) -> None:
        self._lanes: dict[Hashable, _Lane] = {}

    async def append(
        self,
        lane_key: Hashable,
        records: list[Prepared],
        send: Send,
        deadline: Callable[[], AbstractContextManager],
    ) -> list:
        """`records` appended through `send` (which builds and sends the requests for the
        records it is given), alone or with others of the same lane; the replies as if
        they went alone. `deadline()` bounds the call (it raises its own error)."""
        lane = self._lanes.get(lane_key)
        if lane is None:
            lane = self._lanes[lane_key] = _Lane()
        call = _Call(records)
        if lane.join(call):
            # Riding: its sender's deadline, which ends first, bounds this call too
            # (no scope of its own, the largest cost of a call that rides).
            call.held = True
            await self._wait_turn(lane, call)
            if not call.sends:
                return call.outcome()
            # Handed back (its sender gave up before sending), its turn came to send.
        elif lane.in_flight < IN_FLIGHT:
            lane.in_flight += 1
            lane.gather(call)
        else:
            lane.waiting.append(call)
        sent = False
        try:
            with deadline():
                await self._wait_turn(lane, call)
                if call.sends:
                    sent = True
                    await self._send(lane, call, send)
        except Exception as exc:
            if sent:  # its riders end as it does (its deadline passing, say)
                for rider in call.riders:
                    rider.error = copy.copy(exc)
            raise
        return call.outcome()

    async def append_together(
        self,
        lane_key: Hashable,
        calls: list[list[Prepared]],
        send: Send,
        deadline: Callable[[], AbstractContextManager],
    ) -> list[list[AppendReply]]:
        """Calls made at once by one caller (the blocking Client's threads, at most a
        batch's size), appended as one: the replies each would have had alone."""
        replies = await self.append(lane_key, [r for c in calls for r in c], send, deadline)
        if len(calls) == 1:  # alone, perhaps in several requests
            return [replies]
        (reply,) = replies
        return [[mine] for mine in shares(reply, [len(c) for c in calls])]

    async def _wait_turn(self, lane: _Lane, call: _Call) -> None:
        """Until the call is answered or may send (then once through the scheduler, so
        that the calls made in the same pass, such as the tasks one answer woke, ride
        along). A call that gives up leaves its place."""
        try:
            while True:
                if not call.sends:
                    await call.ready.wait()
                if not call.sends:
                    break  # answered
                await trio.lowlevel.checkpoint()
                if call.riders or call.held or lane.calls_in_flight < 2:
                    break
                # Alone while a request of several calls is on its way: it goes after
                # that one, with what its callers append then (see the module's doc).
                call.held = True
                if lane.gathering is call:
                    lane.gathering = None
                call.sends = False
                call.ready = trio.Event()
                lane.in_flight -= 1
                lane.waiting.appendleft(call)
        except BaseException:
            if lane.gathering is call:
                lane.gathering = None
            if call.sends:  # its turn came as it gave up: its riders go back, first
                lane.waiting.extendleft(reversed(call.riders))
                for rider in call.riders:
                    rider.taken = False
                self._next(lane)
            elif not call.taken:
                lane.waiting.remove(call)
            raise
        if lane.gathering is call:
            lane.gathering = None

    async def _send(self, lane: _Lane, first: _Call, send: Send) -> None:
        riders = first.riders
        lane.calls_in_flight += 1 + len(riders)
        try:
            if not riders:
                first.replies = await send(first.records)
            else:
                batch = [first, *riders]
                (reply,) = await send([r for call in batch for r in call.records])
                counts = [len(call.records) for call in batch]
                for call, mine in zip(batch, shares(reply, counts), strict=True):
                    call.replies = [mine]
        except BaseException as exc:
            for rider in riders:
                rider.error = (
                    copy.copy(exc)  # each task raises its own
                    if isinstance(exc, Exception)
                    else OutcomeUnknownError("the append it rode with was given up")
                )
            raise
        finally:
            lane.calls_in_flight -= 1 + len(riders)
            for rider in riders:
                rider.ready.set()
            self._next(lane)

    def _next(self, lane: _Lane) -> None:
        """A request of the lane is over: the calls waiting (up to a batch's size) go
        next, together, sent by the first of them. They are chosen now, so that requests
        answered together (a group commit answers many) free one slot each for them,
        rather than each sending one of them alone."""
        if not lane.waiting:
            lane.in_flight -= 1
            return
        first = lane.waiting.popleft()
        first.riders = []
        lane.gather(first)
        while lane.waiting and lane.join(lane.waiting[0]):
            lane.waiting.popleft()
        first.ready.set()


def shares(reply: AppendReply, counts: list[int]) -> list[AppendReply]:
    """A batch's reply as each of the calls whose `counts` records it carried, in order,
    sees it."""
    if reply.first_offset is None:
        return [reply] * len(counts)
    out = []
    first = reply.first_offset
    for count in counts:
        out.append(
            AppendReply(
                first,
                first + count - 1,
                reply.commit_offset,
                reply.majority_flushed_offset,
                reply.majority_dirty_offset,
            )
        )
        first += count
    return out
