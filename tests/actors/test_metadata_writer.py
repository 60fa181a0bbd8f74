"""The metadata writer saves the groups that asked while its last pass ran in one pass,
and a save whose group stops before a pass took it is dropped."""

from __future__ import annotations

import trio

from quorumlog.actors.services.metadata_writer import MetadataWriter


class Store:
    def __init__(self, path: str, saved: list):
        self.path = path
        self._saved = saved

    def save(self, meta) -> None:
        self._saved.append((self.path, meta))


async def test_groups_that_ask_during_a_pass_share_the_next_and_a_cancelled_one_is_dropped():
    saved: list = []
    passes: list[int] = []
    release = trio.Event()

    async def run_sync(fn, saves):
        passes.append(len(saves))
        await release.wait()  # the storage thread is busy with this pass
        fn(saves)

    writer = MetadataWriter(run_sync, pool=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(writer.save, Store("a", saved), 1)
        await trio.testing.wait_all_tasks_blocked()  # pass 1 holds "a"
        nursery.start_soon(writer.save, Store("b", saved), 2)
        doomed = trio.CancelScope()
        nursery.start_soon(_save_in, doomed, writer, Store("gone", saved), 3)
        await trio.testing.wait_all_tasks_blocked()
        doomed.cancel()  # its partition is deleted before a pass took it
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert passes == [1, 1], "b waited for the next pass, alone once gone was dropped"
    assert saved == [("a", 1), ("b", 2)]


async def _save_in(scope: trio.CancelScope, writer: MetadataWriter, store: Store, meta) -> None:
    with scope:
        await writer.save(store, meta)
