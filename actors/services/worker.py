"""One long-lived thread for a node's blocking storage calls (fsync)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

import trio
from outcome import capture as outcome_capture


class WorkerThread:
    """Runs blocking calls (fsync) on one long-lived thread, in order.

    A hop to a dedicated thread costs a fraction of one through trio's thread pool, which
    matters when every quorum append waits for an fsync.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="log-fsync", daemon=True)
            self._thread.start()
        task = trio.lowlevel.current_task()
        self._queue.put((fn, args, trio.lowlevel.current_trio_token(), task))
        # Not cancellable (a cancellation waits until it returns): the call runs to its
        # end anyway, and the log must not move on (close files, say) while the thread
        # still works on them. Parked without an Event or a shielded scope, whose costs
        # counted on every fsync.
        return await trio.lowlevel.wait_task_rescheduled(_not_now)

    def _serve(self) -> None:
        while (job := self._queue.get()) is not None:
            fn, args, token, task = job
            outcome = outcome_capture(fn, *args)
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(trio.lowlevel.reschedule, task, outcome)

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread = None


def _not_now(_: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED
