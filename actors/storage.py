"""A node's data directory: one folder per Raft group replica, opened by the rules.

    DIR/controller/               group 0, the controller (cluster metadata)
    DIR/topics/NAME/PARTITION/    one partition's group
        consensus.meta            term, vote, last committed configuration, incarnation
        log/                      segments and their indexes
        group                     which group this is (its id), written when created

A new directory is bootstrapped from the initial voters (the controller and the topic
`default` with one partition on all of them), or (--join) starts both with no
configuration and learns them from the leader that adds the node; either way each group
gets a fresh incarnation id (storage rule 9). A log without metadata, or metadata that
cannot be read, is corruption: never start fresh on it (rule 5). A directory written by
quorumlog 0.3 (one group: DIR/consensus.meta and DIR/log/) is moved to
DIR/topics/default/0/ on start, and its controller bootstrapped from that group's
configuration.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import structlog

from log.files import CorruptionError, FileSystem, read_whole_file, write_file_atomically
from log.metadata import METADATA_FILE, ConsensusMetadata, MetadataStore
from log.wal import Log, LogConfig, RunSync
from membership.config import Configuration, InvalidConfigurationError

logger = structlog.get_logger("quorumlog.storage")

LOG_DIR = "log"
CONTROLLER_DIR = "controller"
TOPICS_DIR = "topics"
GROUP_FILE = "group"
CONTROLLER_GROUP = 0
DEFAULT_TOPIC = "default"
DEFAULT_GROUP = 1  # the group of partition 0 of `default`, the first the controller numbers


class BootstrapError(Exception):
    """The data directory is empty and nothing says how to start the cluster."""


@dataclass(slots=True)
class GroupStorage:
    group_id: int
    directory: str
    log: Log
    store: MetadataStore
    meta: ConsensusMetadata


@dataclass(slots=True)
class NodeStorage:
    controller: GroupStorage
    # (topic, partition) -> that partition's group, for every replica hosted here.
    partitions: dict[tuple[str, int], GroupStorage] = field(default_factory=dict)

    @property
    def groups(self) -> list[GroupStorage]:
        return [self.controller, *self.partitions.values()]

    def close(self) -> None:
        for group in self.groups:
            group.log.close()


def partition_dir(data_dir: str, topic: str, partition: int) -> str:
    return os.path.join(data_dir, TOPICS_DIR, topic, str(partition))


def open_group_storage(
    fs: FileSystem,
    directory: str,
    group_id: int,
    *,
    config: Configuration | None,
    create: bool,
    rng: random.Random,
    log_config: LogConfig | None = None,
    run_sync: RunSync,
    repair: bool = False,
) -> GroupStorage:
    """Open one group's folder; with `create`, a missing one starts with `config` (None:
    it waits to be added by the group's leader)."""
    fs.makedirs(directory)
    store = MetadataStore(fs, directory)
    meta = store.load()
    log_dir = os.path.join(directory, LOG_DIR)
    had_log = fs.exists(log_dir) and any(n.endswith(".log") for n in fs.listdir(log_dir))
    log = Log.open(fs, log_dir, log_config, run_sync=run_sync, repair=repair)
    try:
        if meta is None:
            if had_log and log.dirty_offset >= 0:
                raise CorruptionError(
                    store.path, 0, "metadata file is missing but the log has data"
                )
            if not create:
                raise CorruptionError(store.path, 0, "metadata file of a hosted group is missing")
            wire = config.to_wire() if config is not None else None
            meta = ConsensusMetadata(incarnation=f"{rng.getrandbits(64):016x}", config=wire)
            store.save(meta)
        elif meta.config is not None:
            try:
                Configuration.from_wire(meta.config)
            except InvalidConfigurationError as exc:
                raise CorruptionError(
                    store.path, 0, f"stored configuration is invalid: {exc}"
                ) from None
        if group_id != CONTROLLER_GROUP:
            _write_group_id(fs, directory, group_id)
    except BaseException:
        log.close()
        raise
    return GroupStorage(group_id, directory, log, store, meta)


def _write_group_id(fs: FileSystem, directory: str, group_id: int) -> None:
    path = os.path.join(directory, GROUP_FILE)
    if not fs.exists(path):
        write_file_atomically(fs, path, json.dumps({"group_id": group_id}).encode())


def _read_group_id(fs: FileSystem, directory: str) -> int:
    path = os.path.join(directory, GROUP_FILE)
    if not fs.exists(path):
        raise CorruptionError(path, 0, "the group file of a partition folder is missing")
    try:
        group_id = json.loads(read_whole_file(fs, path))["group_id"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptionError(path, 0, f"unreadable group file: {exc}") from None
    if type(group_id) is not int or group_id <= CONTROLLER_GROUP:
        raise CorruptionError(path, 0, f"bad group id {group_id!r}")
    return group_id


def open_storage(
    fs: FileSystem,
    data_dir: str,
    *,
    peers: Mapping[int, str] | None,
    rng: random.Random,
    join: bool = False,
    log_config: LogConfig | None = None,
    run_sync: RunSync,
    repair: bool = False,
) -> NodeStorage:
    """Open every group replica in `data_dir`, bootstrapping a new node first."""
    fs.makedirs(data_dir)
    controller_dir = os.path.join(data_dir, CONTROLLER_DIR)
    if fs.exists(os.path.join(data_dir, METADATA_FILE)):
        _migrate_single_group(fs, data_dir)
    new = not fs.exists(os.path.join(controller_dir, METADATA_FILE))
    bootstrap: Configuration | None = None
    if new:
        if _hosts_partitions(fs, data_dir):
            # The default group exists but not the controller: a migrated 0.3 directory
            # (or one whose controller folder was lost, which this cannot tell apart).
            bootstrap = _committed_config(fs, partition_dir(data_dir, DEFAULT_TOPIC, 0))
        elif join:
            bootstrap = None
        elif peers:
            bootstrap = Configuration.bootstrap(peers)
        else:
            raise BootstrapError(
                f"{data_dir} holds no cluster: give --peers to start a new one, or --join"
            )
    opened: list[GroupStorage] = []

    def open_group(directory: str, group_id: int) -> GroupStorage:
        storage = open_group_storage(
            fs,
            directory,
            group_id,
            config=bootstrap,
            create=new,
            rng=rng,
            log_config=log_config,
            run_sync=run_sync,
            repair=repair,
        )
        opened.append(storage)
        return storage

    try:
        controller = open_group(controller_dir, CONTROLLER_GROUP)
        node = NodeStorage(controller)
        if new:
            default_dir = partition_dir(data_dir, DEFAULT_TOPIC, 0)
            node.partitions[(DEFAULT_TOPIC, 0)] = open_group(default_dir, DEFAULT_GROUP)
        for topic, partition, directory in _partition_dirs(fs, data_dir):
            if (topic, partition) not in node.partitions:
                group_id = _read_group_id(fs, directory)
                node.partitions[(topic, partition)] = open_group(directory, group_id)
    except BaseException:
        for storage in opened:
            storage.log.close()
        raise
    return node


def _partition_dirs(fs: FileSystem, data_dir: str) -> list[tuple[str, int, str]]:
    topics_dir = os.path.join(data_dir, TOPICS_DIR)
    if not fs.exists(topics_dir):
        return []
    found = []
    for topic in sorted(fs.listdir(topics_dir)):
        for name in sorted(fs.listdir(os.path.join(topics_dir, topic))):
            if name.isdigit():
                found.append((topic, int(name), os.path.join(topics_dir, topic, name)))
    return found


def group_dirs(fs: FileSystem, data_dir: str) -> list[str]:
    """Every group folder of a node's data directory, the controller's first (for offline
    tools; a 0.3 directory is one group)."""
    if fs.exists(os.path.join(data_dir, METADATA_FILE)):
        return [data_dir]
    controller = os.path.join(data_dir, CONTROLLER_DIR)
    found = [controller] if fs.exists(controller) else []
    return found + [d for _, _, d in _partition_dirs(fs, data_dir)]


def _hosts_partitions(fs: FileSystem, data_dir: str) -> bool:
    return bool(_partition_dirs(fs, data_dir))


def _committed_config(fs: FileSystem, directory: str) -> Configuration | None:
    meta = MetadataStore(fs, directory).load()
    if meta is None or meta.config is None:
        return None
    return Configuration.from_wire(meta.config)


def _migrate_single_group(fs: FileSystem, data_dir: str) -> None:
    """Move a 0.3 directory's one group to DIR/topics/default/0/ (renames only: a crash
    in between leaves files the next start moves on)."""
    target = partition_dir(data_dir, DEFAULT_TOPIC, 0)
    fs.makedirs(target)
    _write_group_id(fs, target, DEFAULT_GROUP)
    # The metadata last: its presence at the top is what marks an unfinished move.
    for name in (LOG_DIR, METADATA_FILE):
        source = os.path.join(data_dir, name)
        if fs.exists(source):
            fs.rename(source, os.path.join(target, name))
    fs.fsync_dir(target)
    fs.fsync_dir(data_dir)
    logger.warning("migrated_0_3_data_directory", data_dir=data_dir, to=target)
