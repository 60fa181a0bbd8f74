"""A node's data directory: one folder per Raft group replica, opened by the rules.

    DIR/lock                      held by the process serving DIR (quorumlog/server/data_lock.py)
    DIR/node                      the id of the node DIR belongs to (JSON)
    DIR/controller/               group 0, the controller (cluster metadata)
    DIR/topics/NAME/PARTITION/    one partition's group
        consensus.meta            term, vote, last committed configuration, incarnation
        log/                      segments and their indexes
        group                     which group this is (its id) and the topic's settings,
                                  written when the replica is created

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
from dataclasses import dataclass, field, replace

import structlog

from quorumlog.actors.services import tombstones
from quorumlog.consumers.state import GROUPS_TOPIC
from quorumlog.controller.state import CONTROLLER_GROUP, DEFAULT_GROUP, DEFAULT_TOPIC
from quorumlog.log.config import LogConfig, TopicSettings
from quorumlog.log.files import CorruptionError, FileSystem, read_whole_file, write_file_atomically
from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.log.metadata_store import METADATA_FILE, MetadataStore
from quorumlog.log.tailcache import TailBudget
from quorumlog.log.wal import Log, RunSync
from quorumlog.membership.config import Configuration, InvalidConfigurationError
from quorumlog.transactions.state import TRANSACTIONS_TOPIC

logger = structlog.get_logger("quorumlog.storage")

LOG_DIR = "log"
CONTROLLER_DIR = "controller"
CONTROLLER_TOPIC = "__controller"  # how offline tools name the controller's group
TOPICS_DIR = "topics"
GROUP_FILE = "group"


NODE_FILE = "node"


class BootstrapError(Exception):
    """The data directory is empty and nothing says how to start the cluster."""

    @classmethod
    def no_cluster(cls, data_dir: str) -> BootstrapError:
        return cls(f"{data_dir} holds no cluster: give --peers to start a new one, or --join")


class WrongNodeError(Exception):
    """The data directory belongs to another node id."""


@dataclass(slots=True)
class GroupStorage:
    group_id: int
    directory: str
    log: Log
    store: MetadataStore
    meta: ConsensusMetadata
    # Where an operator's trim starts the replica's readers, as its group file keeps it: a
    # restart serves nothing before it while the controller's log is applied again.
    log_floor: int = 0


# The controller's log holds commands, not records: `[log] timestamp_type` is `default`'s.
CONTROLLER_SETTINGS = TopicSettings(timestamp_type="create")
# The cluster's own topics, which its coordinators create: each partition a command log
# (actors/coordinator/command_log.py).
INTERNAL_TOPICS = (GROUPS_TOPIC, TRANSACTIONS_TOPIC)
# They hold commands, and each snapshot of a partition's whole state lets what precedes it
# go: small segments, dropped up to the last snapshot.
COMMAND_LOG = {
    "segment_bytes_max": 256 * 1024,
    "compact_to_snapshots": True,
    "timestamp_type": "create",
    "retention_bytes": None,
    "retention_ms": None,
}


def topic_log_config(topic: str, settings: TopicSettings, base: LogConfig) -> LogConfig:
    """A replica's log settings: the node's, changed by its topic's."""
    config = settings.applied_to(base)
    return replace(config, **COMMAND_LOG) if topic in INTERNAL_TOPICS else config


@dataclass(slots=True)
class NodeStorage:
    fs: FileSystem
    data_dir: str
    log_config: LogConfig
    run_sync: RunSync
    controller: GroupStorage
    # (topic, partition) -> that partition's group, for every replica hosted here.
    partitions: dict[tuple[str, int], GroupStorage] = field(default_factory=dict)
    node_id: int = 0
    cluster_id: str | None = None  # recorded once the cluster has named itself
    # (topic, partition) -> group id of a replica moved off and deleted (actors/services/tombstones.py;
    # -1 if unreadable)
    tombstones: dict[tuple[str, int], int] = field(default_factory=dict)
    # What the leaders' caches of recent batches hold together (log/tailcache.py).
    tail_budget: TailBudget = field(default_factory=TailBudget)

    def record_cluster_id(self, cluster_id: str) -> None:
        """Keep the cluster's id in the directory (transport/identity.py)."""
        if cluster_id != self.cluster_id:
            _write_node_file(self.fs, self.data_dir, self.node_id, cluster_id)
            self.cluster_id = cluster_id

    @property
    def groups(self) -> list[GroupStorage]:
        return [self.controller, *self.partitions.values()]

    def create_partition(
        self,
        topic: str,
        partition: int,
        group_id: int,
        *,
        config: Configuration | None,
        settings: TopicSettings,
        rng: random.Random,
    ) -> GroupStorage:
        """A new replica of a partition: bootstrapped with `config`, or (None) waiting to
        be added by the group's leader. Blocking (files and fsyncs): the node runs it on
        its storage thread and then `adds` it.

        The folder is made whole under another name, then renamed (storage rule 7 for a
        folder): a crash in between leaves a staging folder that is no partition, never a
        partition without its metadata (which a restart would take for damage)."""
        directory = partition_dir(self.data_dir, topic, partition)
        staging = os.path.join(os.path.dirname(directory), f".{partition}.new")
        meta = new_metadata(config, rng)
        buried = tombstones.carried_vote(self.fs, directory, group_id)
        if buried is not None:  # this replica was here before: it never votes twice in a term
            meta = meta.with_vote(buried.current_term, buried.voted_for)
        self.tombstones.pop((topic, partition), None)
        for earlier in (directory, staging):  # a replica of an earlier topic of that name
            if self.fs.exists(earlier):
                self.fs.remove_tree(earlier)
        self.fs.makedirs(staging)
        _write_group_file(self.fs, staging, group_id, settings)
        MetadataStore(self.fs, staging).save(meta)
        self.fs.rename(staging, directory)
        self.fs.fsync_dir(os.path.dirname(directory))
        return open_group_storage(
            self.fs,
            directory,
            group_id,
            config=config,
            create=False,
            rng=rng,
            log_config=topic_log_config(topic, settings, self.log_config),
            run_sync=self.run_sync,
            tail_budget=self.tail_budget,
        )

    def log_config_of(self, topic: str, settings: TopicSettings) -> LogConfig:
        """The log settings a replica of `topic` with `settings` runs with here."""
        return topic_log_config(topic, settings, self.log_config)

    def keep_settings(
        self, topic: str, partition: int, settings: TopicSettings, log_floor: int
    ) -> None:
        """Record a topic's changed settings and its partition's log start with this
        replica (blocking: a file written atomically), so that a restart opens it with
        them before it hears the controller."""
        storage = self.partitions[(topic, partition)]
        _write_group_file(self.fs, storage.directory, storage.group_id, settings, log_floor)
        storage.log_floor = log_floor

    def add(self, topic: str, partition: int, storage: GroupStorage) -> None:
        self.partitions[(topic, partition)] = storage

    def reopen(self, storage: GroupStorage, rng: random.Random) -> GroupStorage:
        """The same replica, read again from disk (after its task crashed)."""
        storage.log.close()
        log_config = CONTROLLER_SETTINGS.applied_to(self.log_config)
        if storage.group_id != CONTROLLER_GROUP:
            _, settings, _ = _read_group_file(self.fs, storage.directory)
            topic = os.path.basename(os.path.dirname(storage.directory))
            log_config = topic_log_config(topic, settings, self.log_config)
        fresh = open_group_storage(
            self.fs,
            storage.directory,
            storage.group_id,
            config=None,
            create=False,
            rng=rng,
            log_config=log_config,
            run_sync=self.run_sync,
            tail_budget=self.tail_budget,
        )
        fresh.log_floor = storage.log_floor
        if storage is self.controller:
            self.controller = fresh
        else:
            key = next(k for k, v in self.partitions.items() if v is storage)
            self.partitions[key] = fresh
        return fresh

    def remove_partition(self, storage: GroupStorage) -> None:
        """Close a replica's log and delete its files (blocking); `pop` it first."""
        storage.log.close()
        self.fs.remove_tree(storage.directory)
        topic_dir = os.path.dirname(storage.directory)
        if not self.fs.listdir(topic_dir):
            self.fs.remove_tree(topic_dir)

    def bury(self, topic: str, partition: int, storage: GroupStorage) -> None:
        """Close a replica that moved off this node and delete its log, keeping its term
        and vote (blocking); `pop` it first."""
        storage.log.close()
        log_dir = os.path.join(storage.directory, LOG_DIR)
        tombstones.lay(self.fs, storage.directory, storage.group_id, log_dir)
        self.tombstones[(topic, partition)] = storage.group_id

    def remove_tombstone(self, topic: str, partition: int) -> None:
        """Its topic was deleted: nothing of it is left (blocking)."""
        del self.tombstones[(topic, partition)]
        directory = partition_dir(self.data_dir, topic, partition)
        self.fs.remove_tree(directory)
        topic_dir = os.path.dirname(directory)
        if not self.fs.listdir(topic_dir):
            self.fs.remove_tree(topic_dir)

    def pop(self, topic: str, partition: int) -> GroupStorage:
        return self.partitions.pop((topic, partition))

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
    tail_budget: TailBudget | None = None,
) -> GroupStorage:
    """Open one group's folder; with `create`, a missing one starts with `config` (None:
    it waits to be added by the group's leader)."""
    fs.makedirs(directory)
    store = MetadataStore(fs, directory)
    meta = store.load()
    log_dir = os.path.join(directory, LOG_DIR)
    had_log = fs.exists(log_dir) and any(n.endswith(".log") for n in fs.listdir(log_dir))
    log = Log.open(
        fs, log_dir, log_config, run_sync=run_sync, repair=repair, tail_budget=tail_budget
    )
    try:
        if meta is None:
            if had_log and log.dirty_offset >= 0:
                raise CorruptionError(
                    store.path, 0, "metadata file is missing but the log has data"
                )
            if not create:
                raise CorruptionError(store.path, 0, "metadata file of a hosted group is missing")
            meta = new_metadata(config, rng)
            store.save(meta)
        elif meta.config is not None:
            try:
                Configuration.from_wire(meta.config)
            except InvalidConfigurationError as exc:
                raise CorruptionError(
                    store.path, 0, f"stored configuration is invalid: {exc}"
                ) from None
    except BaseException:
        log.close()
        raise
    return GroupStorage(group_id, directory, log, store, meta)


def new_metadata(config: Configuration | None, rng: random.Random) -> ConsensusMetadata:
    """A new replica's: a fresh incarnation (storage rule 9), no term, no vote."""
    wire = config.to_wire() if config is not None else None
    return ConsensusMetadata(incarnation=f"{rng.getrandbits(64):016x}", config=wire)


def _write_group_file(
    fs: FileSystem, directory: str, group_id: int, settings: TopicSettings, log_floor: int = 0
) -> None:
    document = {"group_id": group_id, **settings.to_wire()}
    if log_floor:
        document["log_start"] = log_floor
    write_file_atomically(fs, os.path.join(directory, GROUP_FILE), json.dumps(document).encode())


def _read_group_file(fs: FileSystem, directory: str) -> tuple[int, TopicSettings, int]:
    """The group id, the topic's settings and the trimmed log start (0: none) kept with a
    replica."""
    path = os.path.join(directory, GROUP_FILE)
    if not fs.exists(path):
        raise CorruptionError(path, 0, "the group file of a partition folder is missing")
    try:
        document = json.loads(read_whole_file(fs, path))
        group_id = document.pop("group_id")
        log_floor = document.pop("log_start", 0)
        settings = TopicSettings.from_wire(document)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptionError(path, 0, f"unreadable group file: {exc}") from None
    if type(group_id) is not int or group_id <= CONTROLLER_GROUP:
        raise CorruptionError(path, 0, f"bad group id {group_id!r}")
    if type(log_floor) is not int or log_floor < 0:
        raise CorruptionError(path, 0, f"bad log start {log_floor!r}")
    return group_id, settings, log_floor


def open_storage(
    fs: FileSystem,
    data_dir: str,
    *,
    node_id: int,
    peers: Mapping[int, str] | None,
    rng: random.Random,
    join: bool = False,
    log_config: LogConfig | None = None,
    run_sync: RunSync,
    repair: bool = False,
) -> NodeStorage:
    """Open every group replica in `data_dir`, bootstrapping a new node first. Raises
    WrongNodeError if the directory belongs to a node other than `node_id`."""
    fs.makedirs(data_dir)
    cluster_id = _check_owner(fs, data_dir, node_id)
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
            raise BootstrapError.no_cluster(data_dir)
    opened: list[GroupStorage] = []

    log_config = log_config or LogConfig()
    tail_budget = TailBudget()

    def open_group(directory: str, group_id: int, config: LogConfig) -> GroupStorage:
        storage = open_group_storage(
            fs,
            directory,
            group_id,
            config=bootstrap,
            create=new,
            rng=rng,
            log_config=config,
            run_sync=run_sync,
            repair=repair,
            tail_budget=tail_budget,
        )
        opened.append(storage)
        return storage

    try:
        controller = open_group(
            controller_dir, CONTROLLER_GROUP, CONTROLLER_SETTINGS.applied_to(log_config)
        )
        node = NodeStorage(
            fs,
            data_dir,
            log_config,
            run_sync,
            controller,
            node_id=node_id,
            cluster_id=cluster_id,
            tail_budget=tail_budget,
        )
        if new and not _hosts_partitions(fs, data_dir):
            default_dir = partition_dir(data_dir, DEFAULT_TOPIC, 0)
            fs.makedirs(default_dir)
            _write_group_file(fs, default_dir, DEFAULT_GROUP, TopicSettings())
        for topic, partition, directory in _partition_dirs(fs, data_dir, with_tombstones=True):
            if tombstones.is_tombstone(fs, directory):
                tombstones.finish(fs, os.path.join(directory, LOG_DIR))
                buried = tombstones.buried_group(fs, directory)
                node.tombstones[(topic, partition)] = -1 if buried is None else buried
                continue
            group_id, settings, log_floor = _read_group_file(fs, directory)
            opened_group = open_group(
                directory, group_id, topic_log_config(topic, settings, log_config)
            )
            opened_group.log_floor = log_floor
            node.partitions[(topic, partition)] = opened_group
    except BaseException:
        for storage in opened:
            storage.log.close()
        raise
    return node


def _check_owner(fs: FileSystem, data_dir: str, node_id: int) -> str | None:
    """The directory records the node it belongs to: a node started on another's data
    (a wrong --id, a copied directory) would answer for that node with its votes and log.
    A directory of an older version, which recorded none, is adopted. Returns the cluster
    id recorded, if any."""
    path = os.path.join(data_dir, NODE_FILE)
    if not fs.exists(path):
        _write_node_file(fs, data_dir, node_id, None)
        return None
    try:
        recorded = json.loads(read_whole_file(fs, path))
        recorded_id, cluster_id = recorded["node_id"], recorded.get("cluster_id")
        if not isinstance(cluster_id, str | None):
            raise TypeError(f"cluster id {cluster_id!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptionError(path, 0, f"unreadable node file: {exc}") from None
    if recorded_id != node_id:
        raise WrongNodeError(
            f"data directory {data_dir} belongs to node {recorded_id}, not to node {node_id} "
            f"(--id {node_id}): start it with --id {recorded_id}, or give node {node_id} "
            "its own directory"
        )
    return cluster_id


def _write_node_file(fs: FileSystem, data_dir: str, node_id: int, cluster_id: str | None) -> None:
    record = {"node_id": node_id, "cluster_id": cluster_id}
    write_file_atomically(fs, os.path.join(data_dir, NODE_FILE), json.dumps(record).encode())


def _partition_dirs(
    fs: FileSystem, data_dir: str, with_tombstones: bool = False
) -> list[tuple[str, int, str]]:
    topics_dir = os.path.join(data_dir, TOPICS_DIR)
    if not fs.exists(topics_dir):
        return []
    found = []
    for topic in sorted(fs.listdir(topics_dir)):
        for name in sorted(fs.listdir(os.path.join(topics_dir, topic))):
            directory = os.path.join(topics_dir, topic, name)
            if name.isdigit() and (with_tombstones or not tombstones.is_tombstone(fs, directory)):
                found.append((topic, int(name), directory))
    return found


def group_dirs(fs: FileSystem, data_dir: str) -> list[tuple[str, int, str]]:
    """Every group folder of a node's data directory as (topic, partition, folder), the
    controller's first as CONTROLLER_TOPIC (for offline tools; a 0.3 directory is one
    group, partition 0 of `default`)."""
    if fs.exists(os.path.join(data_dir, METADATA_FILE)):
        return [(DEFAULT_TOPIC, 0, data_dir)]
    controller = os.path.join(data_dir, CONTROLLER_DIR)
    found = [(CONTROLLER_TOPIC, 0, controller)] if fs.exists(controller) else []
    return found + _partition_dirs(fs, data_dir)


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
    if not fs.exists(os.path.join(target, GROUP_FILE)):
        _write_group_file(fs, target, DEFAULT_GROUP, TopicSettings())
    # The metadata last: its presence at the top is what marks an unfinished move.
    for name in (LOG_DIR, METADATA_FILE):
        source = os.path.join(data_dir, name)
        if fs.exists(source):
            fs.rename(source, os.path.join(target, name))
    fs.fsync_dir(target)
    fs.fsync_dir(data_dir)
    logger.warning("migrated_0_3_data_directory", data_dir=data_dir, to=target)
