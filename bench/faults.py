"""Disk faults for a stopped node's data directory, as the fault harness applies them.

- `lose_unsynced`: the disk of a power loss. Nodes of the harness run with
  QUORUMLOG_FAULT_SYNC_JOURNAL, so every fsync leaves a line "PATH<TAB>BYTES" (log/files.py);
  each segment is cut back to what its last fsync covered, plus a seeded share of the rest
  (write-back may have saved some of it), torn anywhere. Nothing an fsync covered is lost,
  so this is a fault a real disk can have and quorumlog must survive.
- `damage`: what bit rot and bad tools do: a cut tail, a flipped bit in the last batch
  (both torn tails: the node cuts them and starts), a flipped bit in the middle of a segment
  or in the term/vote metadata (corruption: the node must refuse to start, exit 3, rather
  than serve wrong data or forget its vote).
"""

from __future__ import annotations

import os
import random

from quorumlog.actors.services.storage import partition_dir
from quorumlog.controller.state import DEFAULT_TOPIC
from quorumlog.log.files import FSYNC_DELAY_FILE
from quorumlog.log.metadata_store import METADATA_FILE
from quorumlog.log.segment import SEGMENT_SUFFIX

TAIL = ("cut-tail", "flip-last-batch")  # torn tails: the node starts
MIDDLE = "flip-middle"  # corruption: the node refuses to start; --repair cuts the log there
METADATA = "flip-metadata"  # corruption: refuses to start; the operator restores the file
DAMAGE = (*TAIL, MIDDLE, METADATA)
# Batches must follow a flip in the first half (about 90 bytes each here); the harness
# spreads its appends over many partitions, so each log grows slowly.
MIDDLE_BYTES_MIN = 4 * 1024
REFUSED = (MIDDLE, METADATA)


def segments(data_dir: str) -> list[str]:
    """Every segment of every group the node hosts."""
    found = []
    for directory, _, names in sorted(os.walk(data_dir)):
        if os.path.basename(directory) == "log":
            found += [
                os.path.join(directory, n) for n in sorted(names) if n.endswith(SEGMENT_SUFFIX)
            ]
    return found


def fsync_delay_path(data_dir: str) -> str:
    """Where a node of the harness reads its fsync delay from (log.files.SyncJournal)."""
    return os.path.join(data_dir, FSYNC_DELAY_FILE)


def metadata_path(data_dir: str) -> str:
    """The consensus metadata that METADATA damages: partition 0 of `default`'s."""
    return os.path.join(partition_dir(data_dir, DEFAULT_TOPIC, 0), METADATA_FILE)


def durable_sizes(journal: str) -> dict[str, int]:
    """The bytes of each file the last fsync covered, from a sync journal."""
    sizes: dict[str, int] = {}
    if not os.path.exists(journal):
        return sizes
    with open(journal) as f:
        for line in f:
            path, sep, size = line.rstrip("\n").rpartition("\t")
            if sep and size.isdigit():  # a line torn by the kill says nothing
                sizes[path] = int(size)
    return sizes


def lose_unsynced(data_dir: str, journal: str, rng: random.Random) -> int:
    """Cut every segment back towards its last fsync; returns the bytes lost."""
    durable = durable_sizes(journal)
    lost = 0
    for path in segments(data_dir):
        size = os.path.getsize(path)
        if path not in durable or durable[path] >= size:
            continue  # never fsynced since the journal began (or nothing unsynced): keep
        keep = durable[path] + int((size - durable[path]) * rng.random() * rng.random())
        os.truncate(path, keep)
        lost += size - keep
    return lost


def damage(data_dir: str, kind: str, rng: random.Random) -> str | None:
    """Damage a stopped node's files; returns what was done, or None if there was no data
    to damage (METADATA aside, segments smaller than MIDDLE_BYTES_MIN are left alone)."""
    if kind == METADATA:
        path = metadata_path(data_dir)
        return _flip(path, rng.randrange(os.path.getsize(path)), rng)
    paths = [p for p in segments(data_dir) if os.path.getsize(p) > MIDDLE_BYTES_MIN]
    if not paths:
        return None
    if kind == MIDDLE:  # in the first half, so that valid batches follow the damage
        path = rng.choice(paths)
        return _flip(path, rng.randrange(os.path.getsize(path) // 2), rng)
    path = paths[-1]
    size = os.path.getsize(path)
    if kind == "cut-tail":
        cut = rng.randint(1, min(4096, size // 4))
        os.truncate(path, size - cut)
        return f"{path}: cut {cut} bytes off the tail"
    return _flip(path, size - rng.randint(1, 40), rng)


def _flip(path: str, position: int, rng: random.Random) -> str:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
    return f"{path}: flipped a bit at byte {position}"
