"""A client call's deadline: `fail_after` that raises CallTimeoutError saying why the
call's last try failed (`AsyncClient` notes it in `problem` as it goes)."""

from __future__ import annotations

from contextvars import ContextVar

import trio

from quorumlog.client.errors import CallTimeoutError

# Why the current call's last try failed, for the message of its timeout (per task).
problem: ContextVar[str | None] = ContextVar("quorumlog_call_problem", default=None)


class Deadline:
    """`fail_after` that raises the client's CallTimeoutError, saying why the last try
    failed; a plain class rather than a generator, since every call enters one."""

    __slots__ = ("_scope", "_timeout_s", "_token")

    def __init__(self, timeout_s: float, at: float | None = None):
        self._timeout_s = timeout_s
        self._scope = trio.CancelScope(
            deadline=trio.current_time() + timeout_s if at is None else at
        )

    def __enter__(self) -> None:
        self._token = problem.set(None)
        self._scope.__enter__()

    def __exit__(self, exc_type, exc, tb) -> bool:
        suppressed = self._scope.__exit__(exc_type, exc, tb)
        last = problem.get()
        problem.reset(self._token)
        if self._scope.cancelled_caught:
            why = f": {last}" if last else ""
            raise CallTimeoutError(f"gave up after {self._timeout_s:g} s{why}") from None
        return suppressed
