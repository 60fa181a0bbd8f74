"""The group manager: runs a node's group replicas, each in its own cancel scope.

A group whose task crashed (a bug, not a storage error) is logged and started again from
its files, with backoff, while the others keep serving; a storage error still stops the
node (fail-stop, storage rule 8). Stopping a group cancels its scope and nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
import trio

from quorumlog.actors.replica.actor import ReplicaActor
from quorumlog.log.files import StorageError
from quorumlog.transport.network import NodeTransport

logger = structlog.get_logger("quorumlog.manager")

RESTART_BACKOFF_S_MIN = 0.1
RESTART_BACKOFF_S_MAX = 10.0


def _is_storage_error(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(StorageError) is not None
    return isinstance(exc, StorageError)


class GroupManager:
    def __init__(
        self,
        nursery: trio.Nursery,
        transport: NodeTransport,
        reopen: Callable[[ReplicaActor], Awaitable[ReplicaActor]],
    ):
        self._nursery = nursery
        self._transport = transport
        self._reopen = reopen  # a fresh actor for a crashed group, from its files
        self._scopes: dict[int, trio.CancelScope] = {}
        self._ended: dict[int, trio.Event] = {}

    async def start(self, group: ReplicaActor) -> None:
        await self._nursery.start(self._supervise, group)

    async def stop(self, group_id: int) -> None:
        """Cancel the group's task and wait until it has ended."""
        scope = self._scopes.pop(group_id, None)
        ended = self._ended.pop(group_id, None)
        if scope is None or ended is None:
            return
        scope.cancel()
        await ended.wait()

    async def _supervise(
        self, group: ReplicaActor, *, task_status=trio.TASK_STATUS_IGNORED
    ) -> None:
        group_id = group.group_id
        scope = self._scopes[group_id] = trio.CancelScope()
        ended = self._ended[group_id] = trio.Event()
        backoff_s = RESTART_BACKOFF_S_MIN
        task_status.started()  # its mailbox takes messages from now on
        try:
            with scope:
                while True:
                    try:
                        await group.run(self._transport)
                    except Exception as exc:
                        if _is_storage_error(exc):
                            raise
                        logger.exception("group_crashed", group=group_id, restart_in_s=backoff_s)
                    await trio.sleep(backoff_s)
                    backoff_s = min(2 * backoff_s, RESTART_BACKOFF_S_MAX)
                    group = await self._reopen(group)
        finally:
            ended.set()
