"""Tombstones: a replica that moved off this node, deleted once its group no longer counts
it, keeping what a vote needs (Kudu's TOMBSTONED tablets).

The partition's folder keeps its consensus metadata (term, vote) and group file; a
`tombstone` file marks it, written before anything is deleted, so a restart half-way
finishes the deletion of the log and never opens the replica again. If the controller
places the partition here again, the new replica starts from the tombstone's term and vote:
a node never votes twice in a term of a group, however often its replica comes and goes.
"""

from __future__ import annotations

import json
import os

from quorumlog.log.files import (
    FileSystem,
    StorageError,
    read_whole_file,
    write_file_atomically,
)
from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.log.metadata_store import MetadataStore

TOMBSTONE_FILE = "tombstone"


def is_tombstone(fs: FileSystem, directory: str) -> bool:
    return fs.exists(os.path.join(directory, TOMBSTONE_FILE))


def lay(fs: FileSystem, directory: str, group_id: int, log_dir: str) -> None:
    """Blocking: mark the folder, then delete its log (the replica is stopped)."""
    record = json.dumps({"group_id": group_id}).encode()
    write_file_atomically(fs, os.path.join(directory, TOMBSTONE_FILE), record)
    fs.fsync_dir(directory)
    finish(fs, log_dir)


def finish(fs: FileSystem, log_dir: str) -> None:
    """Delete what a tombstone left of its log (a restart during `lay`)."""
    if fs.exists(log_dir):
        fs.remove_tree(log_dir)


def buried_group(fs: FileSystem, directory: str) -> int | None:
    """The group id a tombstone is of (None if unreadable: nothing is carried over)."""
    try:
        group_id = json.loads(read_whole_file(fs, os.path.join(directory, TOMBSTONE_FILE)))[
            "group_id"
        ]
    except (ValueError, KeyError, TypeError, StorageError):
        return None
    return group_id if type(group_id) is int else None


def carried_vote(fs: FileSystem, directory: str, group_id: int) -> ConsensusMetadata | None:
    """The term and vote of a tombstone of `group_id` in `directory`, if there is one."""
    if not is_tombstone(fs, directory) or buried_group(fs, directory) != group_id:
        return None
    return MetadataStore(fs, directory).load()
