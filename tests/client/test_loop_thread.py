"""`LoopThread`: a trio resource served to blocking threads (what `Client` and `Consumer`
are made of). Calls from many threads run together; closing never leaves a thread waiting."""

from __future__ import annotations

import gc
import threading
import time

import outcome
import pytest
import trio

from quorumlog import Client
from quorumlog.client.errors import QuorumLogError
from quorumlog.client.loop_thread import LoopThread


class Resource:
    """An async context manager with calls that take a while, as a client's do."""

    def __init__(self, together: int = 0) -> None:
        self.running = 0
        self.most_at_once = 0
        # With `together`, `echo` answers only once that many calls run at once.
        self.together = together
        self._all_in = trio.Event()

    async def __aenter__(self) -> Resource:
        return self

    async def __aexit__(self, *exc) -> None:
        pass

    async def echo(self, value: int, delay_s: float = 0.05) -> int:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if self.together:
                if self.running == self.together:
                    self._all_in.set()
                with trio.fail_after(30):  # a call that never has company fails the test
                    await self._all_in.wait()
            else:
                await trio.sleep(delay_s)
        finally:
            self.running -= 1
        return value

    async def fail(self) -> None:
        raise QuorumLogError("refused: as asked")


def test_calls_from_many_threads_run_together_and_each_gets_its_own_answer():
    resource = Resource(together=64)
    loop = LoopThread(resource, "client")
    loop.start()
    answers: dict[int, int] = {}

    def call(i: int) -> None:
        answers[i] = loop.run(resource.echo, i)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    loop.close()
    assert answers == {i: i for i in range(64)}  # every call answered: all ran at once
    assert resource.most_at_once == 64


def test_errors_reach_the_caller_and_a_closed_loop_refuses_calls():
    resource = Resource()
    loop = LoopThread(resource, "client")
    with pytest.raises(QuorumLogError, match="not open"):
        loop.run(resource.echo, 1)
    loop.start()
    with pytest.raises(QuorumLogError, match="as asked"):
        loop.run(resource.fail)
    assert loop.run(resource.echo, 7, delay_s=0) == 7
    loop.close()
    with pytest.raises(QuorumLogError, match="not open"):
        loop.run(resource.echo, 1)


def test_closing_ends_a_call_in_flight_with_an_error_instead_of_leaving_it_waiting():
    resource = Resource()
    loop = LoopThread(resource, "client")
    loop.start()
    outcome: list[BaseException] = []

    def waiting() -> None:
        try:
            loop.run(resource.echo, 1, delay_s=60)
        except QuorumLogError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=waiting)
    thread.start()
    while resource.running == 0:
        time.sleep(0.01)
    loop.close()
    thread.join(timeout=10)
    assert not thread.is_alive() and "closed during the call" in str(outcome[0])


def test_a_call_interrupted_before_it_woke_the_loop_leaves_it_to_the_next_call_and_close():
    """Ctrl-C or SIGTERM (KeyboardInterrupt in the main thread) may land between a call's
    queueing and its wake-up of the idle loop; the next call, and close, still wake it
    (`consume --group` stopped by SIGTERM once hung in close, its loop asleep for good)."""
    resource = Resource()
    loop = LoopThread(resource, "client")
    loop.start()
    while not loop._idle:  # asleep, waiting for a wake-up
        time.sleep(0.01)
    wake_loop = loop._wake_loop

    def interrupted() -> None:
        loop._wake_loop = wake_loop
        raise KeyboardInterrupt

    loop._wake_loop = interrupted
    with pytest.raises(KeyboardInterrupt):
        loop.run(resource.echo, 1, delay_s=0)
    answers: list[int] = []
    caller = threading.Thread(target=lambda: answers.append(loop.run(resource.echo, 2, delay_s=0)))
    caller.start()
    caller.join(timeout=10)
    assert answers == [2]
    closer = threading.Thread(target=loop.close)
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive()


def test_a_client_dropped_without_close_stops_its_thread():
    client = Client("127.0.0.1:1")  # connects on its first call only
    thread = client._loop._thread
    assert thread is not None and thread.is_alive()
    del client
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


class Together:
    """A resource whose `each` serves many items in one call, an outcome per item."""

    def __init__(self) -> None:
        self.served: list[list[int]] = []
        self.busy = threading.Event()
        self.go_on = threading.Event()

    async def __aenter__(self) -> Together:
        return self

    async def __aexit__(self, *exc) -> None:
        pass

    async def block(self) -> None:
        self.busy.set()
        self.go_on.wait(timeout=30)  # holds the loop: calls made meanwhile queue up

    async def each(self, items: list[int], scale: int) -> list[outcome.Outcome]:
        self.served.append(items)
        if scale == 0:
            raise QuorumLogError("refused: all of them")
        return [
            outcome.Value(i * scale) if i >= 0 else outcome.Error(QuorumLogError(f"bad {i}"))
            for i in items
        ]


def _queued_while_busy(loop: LoopThread, resource: Together, calls: list) -> dict:
    """Run `calls` (key, item) from a thread each while the loop is held busy."""
    answers: dict = {}

    def call(key: tuple, item: int) -> None:
        try:
            answers[item] = loop.run_together(resource.each, key, item)
        except QuorumLogError as exc:
            answers[item] = exc

    blocker = threading.Thread(target=loop.run, args=(resource.block,))
    blocker.start()
    resource.busy.wait()
    threads = [threading.Thread(target=call, args=c) for c in calls]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while len(loop._calls) < len(calls) and time.monotonic() < deadline:
        time.sleep(0.01)
    resource.go_on.set()
    for thread in [blocker, *threads]:
        thread.join()
    return answers


def test_calls_queued_together_are_served_by_one_call_and_each_gets_its_own_outcome():
    resource = Together()
    loop = LoopThread(resource, "client")
    loop.start()
    calls = [((10,), i) for i in (1, 2, -3, 4)] + [((100,), 5), ((0,), 6), ((0,), 7)]
    answers = _queued_while_busy(loop, resource, calls)
    loop.close()
    assert sorted(map(sorted, resource.served)) == [[-3, 1, 2, 4], [5], [6, 7]]
    assert [answers[i] for i in (1, 2, 4, 5)] == [10, 20, 40, 500]
    assert str(answers[-3]) == "bad -3"  # its own error; the others of its call succeed
    # A call that fails fails each caller, each with an error of its own.
    assert str(answers[6]) == str(answers[7]) == "refused: all of them"
    assert answers[6] is not answers[7]


def test_a_call_served_together_fails_cleanly_when_the_loop_closes_or_answers_wrongly():
    class Odd(Together):
        async def each(self, items: list[int], how: str) -> list[outcome.Outcome]:
            if how == "short":
                return []  # a bug in the served function: every caller hears of it
            self.busy.set()
            async with trio.open_nursery() as nursery:  # cancelled as a group on close
                nursery.start_soon(trio.sleep_forever)
                nursery.start_soon(trio.sleep_forever)
            return []

    resource = Odd()
    loop = LoopThread(resource, "client")
    loop.start()
    with pytest.raises(TypeError, match="answered 1 calls"):
        loop.run_together(resource.each, ("short",), 1)
    got: list[BaseException] = []

    def waiting() -> None:
        try:
            loop.run_together(resource.each, ("hang",), 2)
        except BaseException as exc:  # what reaches the thread, whatever it is
            got.append(exc)

    thread = threading.Thread(target=waiting)
    thread.start()
    resource.busy.wait()
    loop.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert isinstance(got[0], QuorumLogError) and "closed during the call" in str(got[0])


class CountedWaits:
    """The loop's lingering lock, counting the waits on it (acquires with a timeout)."""

    def __init__(self, lock) -> None:
        self._lock = lock
        self.waits = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if timeout != -1:
            self.waits += 1
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


def _served_together_first(loop: LoopThread, resource: Together, items: list[int]) -> None:
    """One call each from threads of their own, queued while the loop is busy, so that one
    `each` serves them all: the loop then expects that many calls back."""
    resource.busy.clear()
    resource.go_on.clear()
    answers = _queued_while_busy(loop, resource, [((1,), i) for i in items])
    assert sorted(answers) == items and sorted(resource.served[-1]) == items


def test_threads_an_answer_released_ride_together_again_though_they_come_back_one_by_one(
    monkeypatch,
):
    # Long enough that only the rule, never the clock, ends the wait here.
    monkeypatch.setattr("quorumlog.client.loop_thread.LINGER_GAP_S", 30.0)
    monkeypatch.setattr("quorumlog.client.loop_thread.LINGER_MAX_S", 30.0)
    resource = Together()
    loop = LoopThread(resource, "client")
    loop.start()
    first = threading.Barrier(4)
    served: dict[int, int] = {}

    def caller(i: int) -> None:
        first.wait()  # all four queue while the loop is held busy, then come back apart
        served[i] = loop.run_together(resource.each, (1,), i)
        time.sleep(0.05 * i)
        served[10 + i] = loop.run_together(resource.each, (1,), 10 + i)

    blocker = threading.Thread(target=loop.run, args=(resource.block,))
    blocker.start()
    resource.busy.wait()
    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    while len(loop._calls) < 4:
        time.sleep(0.01)
    resource.go_on.set()
    for thread in [blocker, *threads]:
        thread.join()
    loop.close()
    assert served == {i: i for i in [0, 1, 2, 3, 10, 11, 12, 13]}
    # The second calls came 50 ms apart, and still went as one.
    assert sorted(map(sorted, resource.served)) == [[0, 1, 2, 3], [10, 11, 12, 13]]


def test_a_lone_thread_and_a_call_after_a_pause_never_wait_for_company(monkeypatch):
    monkeypatch.setattr("quorumlog.client.loop_thread.LINGER_GAP_S", 0.05)
    monkeypatch.setattr("quorumlog.client.loop_thread.LINGER_MAX_S", 0.2)
    resource = Together()
    loop = LoopThread(resource, "client")
    waits = loop._gathered = CountedWaits(loop._gathered)
    loop.start()
    for i in range(5):  # each answered alone: the one call it expects is the next one
        assert loop.run_together(resource.each, (1,), i) == i
    assert waits.waits == 0
    _served_together_first(loop, resource, [1, 2, 3])
    time.sleep(0.5)  # the three threads went on to other things
    assert loop.run_together(resource.each, (1,), 4) == 4
    assert waits.waits == 0
    # Without the pause, a call alone where three were answered waits one gap for the
    # others (they never come): what the counter sees when the loop lingers.
    _served_together_first(loop, resource, [1, 2, 3])
    assert loop.run_together(resource.each, (1,), 5) == 5
    assert waits.waits == 1
    loop.close()
