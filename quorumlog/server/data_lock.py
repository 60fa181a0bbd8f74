"""The lock on a data directory: one process at a time serves it or rewrites it.

`serve` and `unsafe-recover` take an exclusive `flock` on DATA/lock before they read or
write anything else there, and hold it for the process's life (the kernel drops it when
the process ends, however it ends: no stale lock after a crash). The file holds the
holder's pid, for the one line that refuses a second process.
"""

from __future__ import annotations

import fcntl
import os

LOCK_FILE = "lock"


class DataDirInUseError(Exception):
    """Another process holds the data directory."""


def lock_data_dir(data_dir: str) -> int:
    """Lock `data_dir` (created if missing) for this process; returns the lock's file
    descriptor, which must stay open. Raises DataDirInUseError if another process holds it."""
    os.makedirs(data_dir, exist_ok=True)
    fd = os.open(os.path.join(data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DataDirInUseError(
            f"data directory {data_dir} is in use by another process (pid {holder})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, b"%d\n" % os.getpid(), 0)
    return fd
