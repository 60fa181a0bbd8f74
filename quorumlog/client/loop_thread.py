"""A trio client served to blocking code: the event loop runs in a daemon thread of its own,
and any thread hands it a call and waits for the result (`Client`, `Consumer`).

Calls from many threads are then in flight together on the client's connections, as tasks
sharing an `AsyncClient` are, instead of taking turns on a blocking socket. Threads queue
their calls and wake the loop only when it is idle: under load, a call costs a queue entry
and a lock, not a wake-up of the loop each (`trio.from_thread.run` costs a system call
and a task of its own per call; measured x0.54 of the `AsyncClient` with 64 threads).

Calls that may be served together (appends) also wait a moment for company. The threads an
answer releases come back one at a time, each waking and taking the GIL in turn, so the
first of them used to find the partition free and go almost alone, the rest following in
small requests. When fewer calls are queued than the loop has just answered, it waits,
its thread asleep so that theirs can run, until that many are queued, as long as they
keep coming (`_linger`): Kafka's linger.ms, but only for calls the loop has reason to
expect. A lone thread's call, or one after a pause, never waits.
"""

from __future__ import annotations

import contextlib
import copy
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

import outcome
import trio

from quorumlog.client.errors import QuorumLogError

# How long the loop waits for the threads it answered to queue their next calls: while
# they keep coming, at most LINGER_GAP_S apart, up to LINGER_MAX_S in all. Each takes tens
# of microseconds to come back (a wake-up and a GIL hand-off), so 64 threads take about a
# millisecond; threads that do not come back cost one gap.
LINGER_GAP_S = 0.0002
LINGER_MAX_S = 0.001


class _Call:
    __slots__ = ("done", "fn", "item", "result")

    def __init__(self, fn: Callable[..., Awaitable[Any]], item: Any = None):
        self.fn = fn  # a call on its own: fn(); served together: the key (fn, *args)
        self.item = item
        # Held until answered: the caller blocks acquiring it. A bare lock, not an Event,
        # whose Condition does its waiting and waking in Python under the GIL (64
        # threads through a stub: 200 -> 167 us of CPU per call).
        self.done = threading.Lock()
        self.done.acquire()
        self.result: outcome.Outcome | None = None


class LoopThread:
    """Enters `resource` (an async context manager) on a trio loop in a new thread, and
    keeps it open until `close`; `run(fn, *args)` calls the coroutine function there."""

    def __init__(self, resource: AbstractAsyncContextManager[Any], what: str, hint: str = ""):
        self._resource = resource
        self._what = what  # "client", "consumer": for the thread's name and errors
        self._hint = hint
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._lock = threading.Lock()  # guards the four below
        self._calls: deque[_Call] = deque()
        # The loop waits for a wake-up to look at the calls; only the loop clears it, and a
        # caller marks it `_woken` only once its wake-up is sent: a caller interrupted before
        # (Ctrl-C, SIGTERM) leaves the next caller, or `stop`, to wake it, not a loop asleep
        # for good with calls queued.
        self._idle = False
        self._woken = False
        self._open = False
        self._wake: trio.Event | None = None
        # Lingering (see the module's doc): calls the loop expects back (those it answered
        # since it last served calls together; written by the loop thread only), and the
        # lock released by the call that makes that many queued, while the loop waits.
        self._expected = 0
        self._answered_at = -math.inf  # when it last answered calls served together
        self._lingering = False  # guarded by _lock
        self._gathered = threading.Lock()
        self._gathered.acquire()

    def start(self) -> None:
        """Returns once the resource is open; raises what opening it raised."""
        ready: queue.Queue[BaseException | None] = queue.Queue(1)
        self._thread = threading.Thread(
            target=trio.run, args=(self._serve, ready), name=f"quorumlog-{self._what}", daemon=True
        )
        self._thread.start()
        error = ready.get()
        if error is not None:
            self._thread.join()
            self._thread = None
            raise error

    def close(self) -> None:
        """Ends the loop (calls in flight fail) and waits for its thread."""
        self.stop()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def stop(self) -> None:
        """Asks the loop to end, without waiting (safe from a finalizer)."""
        with self._lock:
            self._open = False
            if self._idle:
                self._wake_loop()

    def run(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        return self._call(_Call(partial(fn, *args, **kwargs)))

    def run_together(
        self, fn: Callable[..., Awaitable[list[outcome.Outcome]]], args: tuple, item: Any
    ) -> Any:
        """As `run`, for calls the loop may serve together: those with the same `fn` and
        `args` that it finds queued at once go to one `fn([item, ...], *args)`, which
        returns an outcome for each item (the blocking Client's appends: a task per call
        was most of the loop's work for them)."""
        return self._call(_Call((fn, *args), item))

    def _call(self, call: _Call) -> Any:
        with self._lock:
            if not self._open:
                closed = "closed" if self._thread is not None else f"not open{self._hint}"
                raise QuorumLogError(f"the {self._what} is {closed}")
            self._calls.append(call)
            if self._idle and not self._woken:
                self._wake_loop()
                self._woken = True
            if self._lingering and len(self._calls) >= self._expected:
                self._lingering = False
                self._gathered.release()
        call.done.acquire()
        assert call.result is not None
        return call.result.unwrap()

    def _wake_loop(self) -> None:
        assert self._token is not None
        # A loop that ended meanwhile fails the queued calls on its way out (_fail_left).
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(lambda: self._wake.set())  # the event of that time

    async def _serve(self, ready: queue.Queue[BaseException | None]) -> None:
        started = False
        try:
            async with self._resource, trio.open_nursery() as calls:
                self._token = trio.lowlevel.current_trio_token()
                with self._lock:
                    self._open = True
                started = True
                ready.put(None)
                await self._dispatch(calls)
                calls.cancel_scope.cancel()
        except BaseException as exc:
            if not started:
                ready.put(exc)
                return
            raise
        finally:
            self._fail_left()

    async def _dispatch(self, calls: trio.Nursery) -> None:
        """Start every queued call as a task; sleep while there is none; end on close."""
        while True:
            self._linger()
            with self._lock:
                batch = list(self._calls)
                self._calls.clear()
                self._idle = self._woken = False
                if not batch:
                    if not self._open:
                        return
                    self._idle = True
                    self._wake = trio.Event()
            if batch:
                together: dict[tuple, list[_Call]] = {}
                for call in batch:
                    if isinstance(call.fn, tuple):
                        together.setdefault(call.fn, []).append(call)
                    else:
                        calls.start_soon(self._run, call)
                for key, group in together.items():
                    calls.start_soon(self._run_together, key, group)
                await trio.lowlevel.checkpoint()
            else:
                await self._wake.wait()

    def _linger(self) -> None:
        """Blocking, up to LINGER_MAX_S: while an append is queued and fewer calls than the
        loop lately answered, until that many are queued or none came for LINGER_GAP_S."""
        if not self._expected:
            return
        now = time.monotonic()
        if now - self._answered_at > LINGER_MAX_S:
            self._expected = 0  # answered a while ago: their threads went on to other things
            return
        with self._lock:
            queued = len(self._calls)
            if not queued:
                return  # none back yet: the first to come wakes the loop
            if queued >= self._expected or not any(isinstance(c.fn, tuple) for c in self._calls):
                self._expected = 0  # all back, or nothing that may ride together
                return
            self._lingering = True
        give_up = now + LINGER_MAX_S
        while True:
            wait_s = min(LINGER_GAP_S, give_up - time.monotonic())
            released = wait_s > 0 and self._gathered.acquire(timeout=wait_s)
            with self._lock:
                if not self._lingering:  # that many came
                    if not released:  # released as it timed out: take it back
                        self._gathered.acquire()
                    break
                came = len(self._calls) > queued
                queued = len(self._calls)
                if not came or time.monotonic() >= give_up:
                    self._lingering = False
                    break
        self._expected = 0

    async def _run(self, call: _Call) -> None:
        result = None
        try:
            result = await outcome.acapture(call.fn)
        finally:
            self._answer(call, result)

    async def _run_together(self, key: tuple, group: list[_Call]) -> None:
        fn, *args = key
        results: list[outcome.Outcome | None] = [None] * len(group)
        try:
            answer = await outcome.acapture(fn, [call.item for call in group], *args)
            if isinstance(answer, outcome.Value):
                if not isinstance(answer.value, list) or len(answer.value) != len(group):
                    wrong = TypeError(f"{fn!r} answered {len(group)} calls with {answer.value!r}")
                    answer = outcome.Error(wrong)
                else:
                    results = answer.value
            if isinstance(answer, outcome.Error) and not _cancelled(answer.error):
                # Each thread raises its own copy (a traceback grows as it is raised).
                results = [outcome.Error(copy.copy(answer.error)) for _ in group]
        finally:
            self._expected += len(group)  # their threads are likely to call again at once
            self._answered_at = time.monotonic()
            for call, result in zip(group, results, strict=True):
                self._answer(call, result)

    def _answer(self, call: _Call, result: outcome.Outcome | None) -> None:
        """Hand the caller its result (None or cancelled: the loop was closed meanwhile)."""
        if result is None or (isinstance(result, outcome.Error) and _cancelled(result.error)):
            result = outcome.Error(QuorumLogError(f"the {self._what} was closed during the call"))
        call.result = result
        call.done.release()

    def _fail_left(self) -> None:
        """Calls that came as the loop ended: they fail rather than wait forever."""
        with self._lock:
            self._open = False
            left = list(self._calls)
            self._calls.clear()
        for call in left:
            call.result = outcome.Error(QuorumLogError(f"the {self._what} is closed"))
            call.done.release()


def _cancelled(error: BaseException) -> bool:
    """Whether `error` is trio's cancellation, or a group of nothing else (a nursery's)."""
    if isinstance(error, BaseExceptionGroup):
        return error.split(trio.Cancelled)[1] is None
    return isinstance(error, trio.Cancelled)
