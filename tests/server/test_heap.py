"""The heap's holders on demand (quorumlog/server/heap.py): the environment says how deep to
trace, and each SIGUSR2 writes the next snapshot whole."""

from __future__ import annotations

import os
import signal
import tracemalloc

import pytest
import trio

from quorumlog.server.heap import ENV, dump_on_signal, frames_wanted, snapshot_path


@pytest.mark.parametrize(("value", "frames"), [("", 0), ("1", 1), (" 25 ", 25), ("100", 100)])
def test_the_environment_says_how_deep(monkeypatch, value, frames):
    monkeypatch.setenv(ENV, value)
    assert frames_wanted() == frames


@pytest.mark.parametrize("value", ["0", "101", "yes", "-3", "2.5"])
def test_a_bad_depth_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(ValueError, match=ENV):
        frames_wanted()


async def test_each_signal_writes_the_next_snapshot(tmp_path):
    tracemalloc.start(1)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(dump_on_signal, str(tmp_path))
            for n in (1, 2):
                held = [bytearray(1000) for _ in range(1000)]  # noqa: F841 (held while traced)
                os.kill(os.getpid(), signal.SIGUSR2)
                with trio.fail_after(30):
                    while not os.path.exists(snapshot_path(str(tmp_path), n)):
                        await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    finally:
        tracemalloc.stop()
    snapshot = tracemalloc.Snapshot.load(snapshot_path(str(tmp_path), 2))
    here = [s for s in snapshot.statistics("filename") if s.traceback[0].filename == __file__]
    assert here and here[0].size >= 1_000_000, "the bytearrays held here are in it"
    assert sorted(os.listdir(tmp_path / "heap")) == ["1.tracemalloc", "2.tracemalloc"]
