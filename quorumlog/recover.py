"""`quorumlog unsafe-recover`: bring a cluster back after it lost a majority (seed 000).

Offline, on a stopped surviving node. In every group it hosts (the controller's and each
partition's) it appends a configuration of the given members, with a version above every
configuration the replica has seen, and records it as committed in the replica's
metadata, so that the node can elect itself; the others are then added back with
`members add`. This throws away the guarantee: records committed on the lost
majority but absent from this replica are gone, and `--inspect` over every surviving data
directory says which offsets those are, from the highest commit offset any survivor knew.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import trio

from quorumlog.actors.storage import LOG_DIR, group_dirs, partition_dir
from quorumlog.controller.state import DEFAULT_TOPIC
from quorumlog.log.batch import BatchType, split_batches
from quorumlog.log.files import OsFileSystem
from quorumlog.log.metadata import MetadataStore
from quorumlog.log.wal import Log, run_inline
from quorumlog.membership.config import Configuration
from quorumlog.raft.configs import config_batch, config_of


@dataclass(frozen=True)
class Replica:
    data_dir: str
    last_offset: int
    last_term: int
    term: int
    known_commit_offset: int
    config_version: int

    def to_row(self) -> dict:
        return {
            "data_dir": self.data_dir,
            "last_offset": self.last_offset,
            "last_term": self.last_term,
            "term": self.term,
            "known_commit_offset": self.known_commit_offset,
            "config_version": self.config_version,
        }


def _open(data_dir: str) -> tuple[Log, MetadataStore]:
    fs = OsFileSystem()
    store = MetadataStore(fs, data_dir)
    if store.load() is None:
        raise ValueError(f"{data_dir} holds no quorumlog node (no {os.path.basename(store.path)})")
    return Log.open(fs, os.path.join(data_dir, LOG_DIR), run_sync=run_inline), store


def _config_version(log: Log, meta_config, config_offset: int) -> int:
    """The highest configuration version this replica has seen (metadata and log tail)."""
    version = Configuration.from_wire(meta_config).version if meta_config is not None else -1
    offset = max(log.log_start_offset, config_offset + 1)
    while offset <= log.dirty_offset:
        chunk = log.read(offset, 1 << 20)
        for header, batch in split_batches(chunk.data):
            if header.batch_type is BatchType.CONFIG:
                version = max(version, config_of(batch, header).version)
        offset = chunk.last_offset + 1
    return version


def _default_dir(data_dir: str) -> str:
    """Partition 0 of `default`: the log the report speaks of (a 0.3 directory is it)."""
    dirs = group_dirs(OsFileSystem(), data_dir)
    return dirs[0] if dirs == [data_dir] else partition_dir(data_dir, DEFAULT_TOPIC, 0)


def inspect(data_dir: str) -> Replica:
    """What partition 0 of `default` holds in this data directory."""
    log, store = _open(_default_dir(data_dir))
    try:
        meta = store.load()
        return Replica(
            data_dir,
            log.dirty_offset,
            log.last_term,
            meta.current_term,
            meta.known_commit_offset,
            _config_version(log, meta.config, meta.config_offset),
        )
    finally:
        log.close()


def lost_range(replicas: list[Replica]) -> tuple[Replica, tuple[int, int] | None]:
    """The most up-to-date replica, and the offsets known committed that none holds."""
    best = max(replicas, key=lambda r: (r.last_term, r.last_offset))
    committed = max(r.known_commit_offset for r in replicas)
    if committed > best.last_offset:
        return best, (best.last_offset + 1, committed)
    return best, None


def recover(data_dir: str, members: dict[int, str]) -> Configuration:
    """Rewrite the configuration of every group in `data_dir` to `members`; returns the
    new configuration of partition 0 of `default`."""
    dirs = group_dirs(OsFileSystem(), data_dir)
    if not dirs:
        raise ValueError(f"{data_dir} holds no quorumlog node")
    configs = {d: _recover_group(d, members) for d in dirs}
    return configs[_default_dir(data_dir)]


def _recover_group(group_dir: str, members: dict[int, str]) -> Configuration:
    log, store = _open(group_dir)
    try:
        meta = store.load()
        version = _config_version(log, meta.config, meta.config_offset) + 1
        config = Configuration(
            version=version, voters=frozenset(members), learners=frozenset(), addresses=members
        )
        log.append([config_batch(config)], max(meta.current_term, log.last_term))
        trio.run(log.flush)
        store.save(
            replace(
                meta,
                config=config.to_wire(),
                config_offset=log.dirty_offset,
                voted_for=None,
            )
        )
        return config
    finally:
        log.close()
