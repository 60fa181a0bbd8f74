"""A trio client served to blocking code: the event loop runs in a daemon thread of its own,
and any thread hands it a call and waits for the result (`Client`, `Consumer`).

Calls from many threads are then in flight together on the client's connections, as tasks
sharing an `AsyncClient` are, instead of taking turns on a blocking socket.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

import trio

from quorumlog.errors import QuorumLogError


class LoopThread:
    """Enters `resource` (an async context manager) on a trio loop in a new thread, and
    keeps it open until `close`; `run(fn, *args)` calls the coroutine function there."""

    def __init__(self, resource: AbstractAsyncContextManager[Any], what: str, hint: str = ""):
        self._resource = resource
        self._what = what  # "client", "consumer": for the thread's name and errors
        self._hint = hint
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None

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
        if self._thread is None:
            return
        if self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()
        self._thread = None
        self._token = None

    def run(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        if self._token is None:
            raise QuorumLogError(f"the {self._what} is not open{self._hint}")
        try:
            return trio.from_thread.run(partial(fn, *args, **kwargs), trio_token=self._token)
        except trio.RunFinishedError:
            raise QuorumLogError(f"the {self._what} is closed") from None

    async def _serve(self, ready: queue.Queue[BaseException | None]) -> None:
        started = False
        try:
            async with self._resource:
                self._token = trio.lowlevel.current_trio_token()
                self._stop = trio.Event()
                started = True
                ready.put(None)
                await self._stop.wait()
        except BaseException as exc:
            if not started:
                ready.put(exc)
                return
            raise
