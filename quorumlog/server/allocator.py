"""glibc's malloc, told to keep the memory a node frees for the next buffer.

By default glibc maps every buffer over 128 KiB on its own and unmaps it when it is freed,
and gives back the top of its heap once 128 KiB lie free there (both thresholds adapt, but
trimming keeps undoing it). A node makes such buffers all the time (a frame of batches
decoded, batches joined for the log), so each one started on fresh pages, and a fresh page
faults when first touched: on this project's virtual machine 3.3 us a page, 0.86 ms a MiB,
and a follower took about 480 faults per 1 MiB append, a third of its CPU for it. With the
thresholds raised it takes about 10.

The price is memory: up to TRIM_BYTES freed stays with the process. Where the C library is
not glibc (no `mallopt`), nothing changes.
"""

from __future__ import annotations

import ctypes

# mallopt's parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_BYTES = 32 * 1024 * 1024  # glibc's largest: buffers below this come from the heap
TRIM_BYTES = 64 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where it cannot."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_BYTES)
    )
