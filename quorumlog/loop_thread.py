"""A trio client served to blocking code: the event loop runs in a daemon thread of its own,
and any thread hands it a call and waits for the result (`Client`, `Consumer`).

Calls from many threads are then in flight together on the client's connections, as tasks
sharing an `AsyncClient` are, instead of taking turns on a blocking socket. Threads queue
their calls and wake the loop only when it is idle: under load, a call costs a queue entry
and a lock, not a wake-up of the loop each (`trio.from_thread.run` costs a system call
and a task of its own per call; measured x0.54 of the `AsyncClient` with 64 threads).
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

import outcome
import trio

from quorumlog.errors import QuorumLogError


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
        self._lock = threading.Lock()  # guards the three below
        self._calls: deque[_Call] = deque()
        self._idle = False  # the loop waits for a wake-up to look at the calls
        self._open = False
        self._wake: trio.Event | None = None

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
            wake = self._idle
            self._idle = False
        if wake:
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
            wake = self._idle
            self._idle = False
        if wake:
            self._wake_loop()
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
            with self._lock:
                batch = list(self._calls)
                self._calls.clear()
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
