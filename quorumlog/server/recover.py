"""`quorumlog unsafe-recover`: bring a cluster back after it lost a majority (seed 000).

Offline, on a stopped surviving node. In every group it hosts (the controller's and each
partition's) it appends a configuration of the given members, with a version above every
configuration the replica has seen, and records it as committed in the replica's
metadata, so that the node can elect itself; the others are then added back with
`members add`. This throws away the guarantee: records committed on the lost
majority but absent from this replica are gone, and `--inspect` over every surviving data
directory says, for every group, which survivor holds the most and which offsets no
survivor holds, from the highest commit offset any survivor knew.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import trio

from quorumlog.actors.services.storage import CONTROLLER_TOPIC, LOG_DIR, group_dirs
from quorumlog.controller.state import DEFAULT_TOPIC
from quorumlog.log.batch import BatchType, split_batches
from quorumlog.log.files import OsFileSystem
from quorumlog.log.metadata_store import MetadataStore
from quorumlog.log.wal import Log, run_inline
from quorumlog.membership.config import Configuration
from quorumlog.raft.configs import config_batch, config_of


@dataclass(frozen=True)
class Replica:
    """One data directory's copy of a group, its offsets counted in records as readers
    count them (docs/offsets.md); a commit past its log is counted as if only records
    came after."""

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


@dataclass(frozen=True)
class GroupReport:
    """One group across the surviving data directories given."""

    topic: str  # CONTROLLER_TOPIC for the controller's group
    partition: int
    replicas: list[Replica]

    @property
    def lost(self) -> tuple[int, int] | None:
        """The offsets known committed that no survivor holds."""
        return lost_range(self.replicas)[1]

    def to_json(self) -> dict:
        best, lost = lost_range(self.replicas)
        return {
            "topic": self.topic,
            "partition": self.partition,
            "replicas": [r.to_row() for r in self.replicas],
            "last_offsets": {r.data_dir: r.last_offset for r in self.replicas},
            "best": best.data_dir,
            "best_last_offset": best.last_offset,
            "lost": None if lost is None else list(lost),
        }

    def to_line(self) -> str:
        best, lost = lost_range(self.replicas)
        offsets = ", ".join(f"{r.data_dir} {r.last_offset}" for r in self.replicas)
        line = (
            f"{self.topic}/{self.partition}: best {best.data_dir} (last offset "
            f"{best.last_offset}, term {best.last_term}); last offsets: {offsets}"
        )
        if lost is not None:
            line += f"; offsets {lost[0]}..{lost[1]} were committed but are on no survivor"
        return line


def inspect(data_dirs: Sequence[str]) -> list[GroupReport]:
    """Every group (the controller's first) as the given data directories hold it."""
    fs = OsFileSystem()
    found: dict[tuple[str, int], list[Replica]] = {}
    for data_dir in data_dirs:
        groups = group_dirs(fs, data_dir)
        if not groups:
            raise ValueError(f"{data_dir} holds no quorumlog node")
        for topic, partition, directory in groups:
            found.setdefault((topic, partition), []).append(_replica(data_dir, directory))
    order = sorted(found, key=lambda key: (key[0] != CONTROLLER_TOPIC, key))
    return [GroupReport(topic, partition, found[(topic, partition)]) for topic, partition in order]


def _replica(data_dir: str, group_dir: str) -> Replica:
    log, store = _open(group_dir)
    try:
        meta = store.load()
        return Replica(
            data_dir,
            log.records_before(log.dirty_offset + 1) - 1,
            log.last_term,
            meta.current_term,
            log.records_before(meta.known_commit_offset + 1) - 1,
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
    groups = group_dirs(OsFileSystem(), data_dir)
    if not groups:
        raise ValueError(f"{data_dir} holds no quorumlog node")
    configs = {(t, p): _recover_group(d, members) for t, p, d in groups}
    return configs[(DEFAULT_TOPIC, 0)]


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
