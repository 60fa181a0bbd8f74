"""Appends that ride together (quorumlog/client/batcher.py): a send function stands in for the
cluster, answering each batch after a pause with offsets as a log would assign them."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from quorumlog.client.batcher import IN_FLIGHT, Batcher
from quorumlog.client.errors import NotLeaderError, OutcomeUnknownError
from quorumlog.client.protocol import BATCH_BYTES_MAX, Record, prepare
from quorumlog.transport.messages import AppendReply


class FakeLog:
    def __init__(self, delay_s: float = 1.0, refuse: bytes | None = None):
        self.delay_s = delay_s
        self.refuse = refuse  # a batch holding a value starting so is refused
        self.batches: list[list[bytes]] = []

    async def send(self, records) -> list[AppendReply]:
        await trio.sleep(self.delay_s)
        values = [r.fields[1] for r in records]
        if self.refuse is not None and any(v.startswith(self.refuse) for v in values):
            raise NotLeaderError("node 2 is not the leader")
        first = sum(len(b) for b in self.batches)
        self.batches.append(values)
        last = first + len(records) - 1
        return [AppendReply(first, last, last, last, last)]


async def append(
    batcher: Batcher, log: FakeLog, *values: bytes, out: dict | None = None, deadline=nullcontext
):
    replies = await batcher.append("lane", prepare(list(values)), log.send, deadline)
    if out is not None:
        out[values] = (replies[0].first_offset, replies[0].last_offset)
    return replies


async def fill_window(nursery: trio.Nursery, batcher: Batcher, log: FakeLog, busy: int = IN_FLIGHT):
    """`busy` requests on their way, each alone."""
    for i in range(busy):
        nursery.start_soon(append, batcher, log, b"busy%d" % i)
        await wait_all_tasks_blocked()


async def test_a_lone_append_goes_at_once_and_alone(autojump_clock):
    log, batcher = FakeLog(), Batcher()
    start = trio.current_time()
    (reply,) = await append(batcher, log, b"a", b"b")
    assert trio.current_time() - start == pytest.approx(log.delay_s)  # not held back
    assert (reply.first_offset, reply.last_offset) == (0, 1)
    assert log.batches == [[b"a", b"b"]]


async def test_appends_made_while_the_window_is_full_ride_together_with_their_own_offsets(
    autojump_clock,
):
    log, batcher = FakeLog(), Batcher()
    got: dict = {}
    async with trio.open_nursery() as nursery:
        for i in range(IN_FLIGHT + 3):
            nursery.start_soon(lambda i=i: append(batcher, log, b"x%d" % i, b"y%d" % i, out=got))
            await wait_all_tasks_blocked()  # each on its way before the next
    assert [len(b) for b in log.batches] == [2] * IN_FLIGHT + [6]
    flat = [v for batch in log.batches for v in batch]
    for (x, y), (first, last) in got.items():
        assert flat[first : last + 1] == [x, y], "each call's records contiguous, its own"


async def test_appends_made_in_the_same_pass_ride_with_the_first_even_with_a_free_slot(
    autojump_clock,
):
    log, batcher = FakeLog(), Batcher()
    async with trio.open_nursery() as nursery:
        for i in range(5):  # as the tasks woken by one answer do
            nursery.start_soon(append, batcher, log, b"v%d" % i)
    assert len(log.batches) == 1
    assert sorted(log.batches[0]) == [b"v%d" % i for i in range(5)]


async def test_a_lone_call_waits_for_a_request_of_several_and_goes_with_their_next_calls(
    autojump_clock,
):
    log, batcher = FakeLog(), Batcher()
    sent_at: dict[bytes, float] = {}

    async def looping(value: bytes) -> None:  # a closed loop: answered, it appends again
        await append(batcher, log, value)
        await append(batcher, log, value + b"'")

    async def lone() -> None:
        await append(batcher, log, b"lone")
        sent_at[b"lone"] = trio.current_time() - log.delay_s

    async with trio.open_nursery() as nursery:
        nursery.start_soon(looping, b"a")
        nursery.start_soon(looping, b"b")  # same pass: one request of two calls
        await wait_all_tasks_blocked()
        nursery.start_soon(lone)  # a slot is free, but alone it would cost a request
    assert [sorted(batch) for batch in log.batches] == [[b"a", b"b"], [b"a'", b"b'", b"lone"]]
    assert sent_at[b"lone"] == pytest.approx(log.delay_s)  # held one round trip, no more


async def test_a_lone_call_goes_at_once_beside_a_request_of_one_call(autojump_clock):
    # Two callers keep two requests going rather than take turns in one.
    log, batcher = FakeLog(), Batcher()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(append, batcher, log, b"a")
        await wait_all_tasks_blocked()
        nursery.start_soon(append, batcher, log, b"b")
        await wait_all_tasks_blocked()
        assert log.batches == [] and trio.current_time() == 0  # both on their way
    assert sorted(log.batches) == [[b"a"], [b"b"]]
    assert trio.current_time() == pytest.approx(log.delay_s)


async def pairs_every(batcher: Batcher, log: FakeLog, period_s: float, count: int) -> None:
    """Requests of two calls, one starting every `period_s`."""
    async with trio.open_nursery() as nursery:
        for k in range(count):
            nursery.start_soon(append, batcher, log, b"p%da" % k)
            nursery.start_soon(append, batcher, log, b"p%db" % k)
            await trio.sleep(period_s)


async def test_a_lone_call_waits_for_a_request_of_several_once_not_again(autojump_clock):
    # Requests of several keep coming (a round trip is 1 s, one starts every 0.6 s): the
    # lone call waits for the one on its way when it came, then goes.
    log, batcher = FakeLog(), Batcher()
    answered: list[float] = []

    async def lone() -> None:
        await append(batcher, log, b"lone")
        answered.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pairs_every, batcher, log, 0.6, 20)
        await trio.sleep(0.1)
        nursery.start_soon(lone)
    assert answered == [pytest.approx(2 * log.delay_s)]


async def test_a_rider_handed_back_keeps_its_own_deadline(autojump_clock):
    # Its sender gives up in its gathering pass, while requests of several are on their
    # way: handed back, the rider must not wait for one of them outside its deadline.
    log, batcher = FakeLog(), Batcher()
    ended: list[float] = []

    async def patient(deadline_at: float) -> None:
        with pytest.raises(trio.TooSlowError):
            await append(batcher, log, b"patient", deadline=lambda: trio.fail_at(deadline_at))
        ended.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pairs_every, batcher, log, 0.6, 20)
        await trio.sleep(0.1)
        start = trio.current_time()
        with trio.CancelScope() as scope:
            nursery.start_soon(patient, start + 0.5)  # rides with the call below
            scope.cancel()  # which gives up in the pass it waits for riders
            await append(batcher, log, b"gives up")
    assert ended == [pytest.approx(start + 0.5)]  # its own deadline, no later


async def test_a_sender_cancelled_before_it_sends_leaves_its_riders_to_go_without_it(
    autojump_clock,
):
    log, batcher = FakeLog(), Batcher()
    got: dict = {}
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as scope:
            nursery.start_soon(lambda: append(batcher, log, b"rider", out=got))
            scope.cancel()  # the sender is cancelled in the pass it waits for riders
            await append(batcher, log, b"impatient")
    assert log.batches == [[b"rider"]]
    assert got == {(b"rider",): (0, 0)}


async def test_a_call_that_gives_up_while_waiting_is_not_sent(autojump_clock):
    log, batcher = FakeLog(), Batcher()
    async with trio.open_nursery() as nursery:
        await fill_window(nursery, batcher, log)
        with trio.move_on_after(0.5):
            await append(batcher, log, b"impatient")
        nursery.start_soon(append, batcher, log, b"later")
    assert [v for batch in log.batches for v in batch][-1] == b"later"
    assert all(b"impatient" not in batch for batch in log.batches)


async def test_a_batch_error_reaches_every_call_in_it(autojump_clock):
    log, batcher = FakeLog(refuse=b"rider"), Batcher()
    errors = []

    async def one(value: bytes) -> None:
        try:
            await append(batcher, log, value)
        except NotLeaderError:
            errors.append(value)

    async with trio.open_nursery() as nursery:
        for i in range(IN_FLIGHT):
            nursery.start_soon(one, b"busy%d" % i)
            await wait_all_tasks_blocked()
        for i in range(3):
            nursery.start_soon(one, b"rider%d" % i)
    assert sorted(errors) == [b"rider0", b"rider1", b"rider2"]
    assert len(log.batches) == IN_FLIGHT


async def test_a_sender_that_gives_up_does_not_strand_those_waiting(autojump_clock):
    log, batcher = FakeLog(), Batcher()
    async with trio.open_nursery() as nursery:
        await fill_window(nursery, batcher, log, IN_FLIGHT - 1)

        async def gives_up() -> None:
            with trio.move_on_after(0.5):  # it sends at once, then gives up
                await append(batcher, log, b"gives up")

        nursery.start_soon(gives_up)
        await wait_all_tasks_blocked()
        nursery.start_soon(append, batcher, log, b"waits")  # the window is full now
    assert log.batches[-1] == [b"waits"]


async def test_riders_of_a_sender_that_gave_up_learn_their_outcome_is_unknown(autojump_clock):
    log, batcher = FakeLog(), Batcher()
    outcomes = []

    async def rider() -> None:
        try:
            await append(batcher, log, b"rider")
            outcomes.append("ok")
        except OutcomeUnknownError:
            outcomes.append("unknown")

    async def sender() -> None:
        with trio.move_on_after(1.5):  # its turn to send comes at 1.0; it gives up at 1.5
            await append(batcher, log, b"sender")

    async with trio.open_nursery() as nursery:
        await fill_window(nursery, batcher, log)
        nursery.start_soon(sender)
        await wait_all_tasks_blocked()
        nursery.start_soon(rider)
    assert outcomes == ["unknown"]


async def test_riders_fill_a_batch_up_to_its_size_and_the_rest_go_next(autojump_clock):
    log, batcher = FakeLog(), Batcher()
    big = b"z" * (BATCH_BYTES_MAX // 3)
    async with trio.open_nursery() as nursery:
        await fill_window(nursery, batcher, log)
        for _ in range(4):
            nursery.start_soon(append, batcher, log, big)
            await wait_all_tasks_blocked()
    assert [len(b) for b in log.batches[IN_FLIGHT:]] == [2, 2]


class Timeout(Exception):
    pass


class Deadline:
    """A client's deadline: cancels what it bounds after `seconds`, then raises Timeout."""

    def __init__(self, seconds: float):
        self.scope = trio.move_on_after(seconds)

    def __enter__(self):
        self.scope.__enter__()

    def __exit__(self, *exc_info):
        self.scope.__exit__(*exc_info)
        if self.scope.cancelled_caught:
            raise Timeout("gave up")


async def test_riders_end_with_their_sender_when_its_deadline_passes(autojump_clock):
    """As in the client, where every call has the same timeout: a call rides with one
    made before it, whose deadline passes first, and ends with the same error."""
    log, batcher = FakeLog(delay_s=10.0), Batcher()
    outcomes: list = []

    async def one(value: bytes) -> None:
        try:
            await append(batcher, log, value, deadline=lambda: Deadline(3.0))
            outcomes.append("ok")
        except Timeout:
            outcomes.append(("timeout", trio.current_time()))

    async with trio.open_nursery() as nursery:
        for i in range(3):  # in the same pass: the first sends, the others ride
            nursery.start_soon(one, b"v%d" % i)
    assert outcomes == [("timeout", 3.0)] * 3
    assert log.batches == []  # given up before the log answered


def test_records_given_as_any_kind_of_bytes_are_prepared_alike():
    class Tagged(bytes):
        pass

    kinds = [b"v", bytearray(b"v"), memoryview(b"v"), Tagged(b"v"), Record(b"v")]
    assert {p.fields[1] for p in prepare(kinds)} == {b"v"}
    assert {p.size for p in prepare(kinds)} == {1 + 16}
