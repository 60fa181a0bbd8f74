"""The heap's holders, on demand: what a soak compares to find what grows (issue 51).

With QUORUMLOG_TRACEMALLOC=FRAMES in its environment a node traces its allocations from the
start (Python's tracemalloc, FRAMES deep: slower and bigger, for a soak or a hunt, not for
production), and each SIGUSR2 writes a snapshot of them to DATA/heap/N.tracemalloc, N
counting from 1; `tracemalloc.Snapshot.load` reads it, and `bench soak --heap` compares two
(the lines whose allocations grew most). Without the variable SIGUSR2 is not handled.
"""

from __future__ import annotations

import os
import signal
import tracemalloc

import structlog
import trio

logger = structlog.get_logger("quorumlog.heap")

ENV = "QUORUMLOG_TRACEMALLOC"
FOLDER = "heap"


def frames_wanted() -> int:
    """How deep the environment asks to trace (0: not at all); a bad value raises
    ValueError naming the variable."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise ValueError(f"{ENV} is a number of frames from 1 to 100, not {text!r}")
    return int(text)


def start_tracing() -> bool:
    """Trace allocations if the environment asks: before anything else is allocated."""
    frames = frames_wanted()
    if frames:
        tracemalloc.start(frames)
    return bool(frames)


def snapshot_path(data_dir: str, n: int) -> str:
    return os.path.join(data_dir, FOLDER, f"{n}.tracemalloc")


async def dump_on_signal(data_dir: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Each SIGUSR2: the traced allocations to the next snapshot file (written under a
    temporary name first, so that a reader never meets half of one)."""
    os.makedirs(os.path.join(data_dir, FOLDER), exist_ok=True)
    count = 0
    with trio.open_signal_receiver(signal.SIGUSR2) as signals:
        task_status.started()
        async for _ in signals:
            count += 1
            path = snapshot_path(data_dir, count)
            snapshot = tracemalloc.take_snapshot()  # the node stands still meanwhile
            await trio.to_thread.run_sync(_write, snapshot, path)
            traced, peak = tracemalloc.get_traced_memory()
            logger.info("heap_snapshot", path=path, traced_bytes=traced, peak_bytes=peak)


def _write(snapshot: tracemalloc.Snapshot, path: str) -> None:
    snapshot.dump(path + ".tmp")
    os.replace(path + ".tmp", path)
