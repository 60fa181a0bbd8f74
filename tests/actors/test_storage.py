"""A node's data directory: a folder per group, bootstrapped, joined, reopened, migrated."""

from __future__ import annotations

import random

import pytest

from quorumlog.actors.services.storage import (
    BootstrapError,
    TopicSettings,
    WrongNodeError,
    group_dirs,
    open_group_storage,
    open_storage,
)
from quorumlog.controller.state import CONTROLLER_GROUP, DEFAULT_GROUP
from quorumlog.log.files import CorruptionError
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.records import make_data_batch
from quorumlog.log.wal import run_inline
from quorumlog.membership.config import Configuration

PEERS = {1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: "127.0.0.1:7003"}


def open_node(fs: MemoryFileSystem, node_id: int = 1, **kwargs):
    return open_storage(
        fs, "/data", node_id=node_id, rng=random.Random(1), run_sync=run_inline, **kwargs
    )


def test_a_new_node_bootstraps_the_controller_and_default_with_the_same_voters():
    fs = MemoryFileSystem()
    node = open_node(fs, peers=PEERS)
    assert node.controller.group_id == CONTROLLER_GROUP
    assert list(node.partitions) == [("default", 0)]
    assert node.partitions[("default", 0)].group_id == DEFAULT_GROUP
    for group in node.groups:
        assert Configuration.from_wire(group.meta.config).voters == set(PEERS)
    assert len({g.meta.incarnation for g in node.groups}) == 2, "one incarnation per group"
    node.close()
    again = open_node(fs, peers=None)
    assert [g.group_id for g in again.groups] == [CONTROLLER_GROUP, DEFAULT_GROUP]
    assert group_dirs(fs, "/data") == [
        ("__controller", 0, "/data/controller"),
        ("default", 0, "/data/topics/default/0"),
    ]


def test_a_joining_node_waits_for_its_configurations_and_an_empty_one_needs_peers():
    node = open_node(MemoryFileSystem(), peers=None, join=True)
    assert [g.meta.config for g in node.groups] == [None, None]
    with pytest.raises(BootstrapError, match="give --peers"):
        open_node(MemoryFileSystem(), peers=None)


def test_a_partition_folder_without_its_group_file_is_corruption():
    fs = MemoryFileSystem()
    open_node(fs, peers=PEERS).close()
    fs.remove("/data/topics/default/0/group")
    with pytest.raises(CorruptionError, match="group"):
        open_node(fs, peers=None)


def test_a_0_3_directory_moves_to_default_and_its_controller_takes_its_configuration():
    fs = MemoryFileSystem()
    config = Configuration.bootstrap(PEERS)
    old = open_group_storage(
        fs,
        "/data",
        CONTROLLER_GROUP,
        config=config,
        create=True,
        rng=random.Random(2),
        run_sync=run_inline,
    )  # the 0.3 layout: consensus.meta and log/ at the top
    old.log.append([make_data_batch([(None, b"kept", 0, None)])], term=1)
    old.log.close()
    node = open_node(fs, peers=None)
    default = node.partitions[("default", 0)]
    assert (default.group_id, default.log.dirty_offset) == (DEFAULT_GROUP, 0)
    assert default.meta.incarnation == old.meta.incarnation
    assert Configuration.from_wire(node.controller.meta.config) == config
    assert not fs.exists("/data/consensus.meta") and not fs.exists("/data/log")


@pytest.mark.parametrize("crash_after_fsyncs", range(6))
def test_a_crash_while_a_partition_is_created_leaves_no_half_made_partition(crash_after_fsyncs):
    """Power lost after any fsync of a partition's creation: on restart the node either
    hosts the partition whole or not at all (never a folder it takes for damage)."""
    fs = MemoryFileSystem()
    node = open_node(fs, peers=PEERS)
    fsyncs = 0
    fsync_dir = fs.fsync_dir

    def counted(path):
        nonlocal fsyncs
        fsyncs += 1
        if fsyncs > crash_after_fsyncs:
            raise PowerLost
        fsync_dir(path)

    fs.fsync_dir = counted
    try:
        node.create_partition(
            "events", 0, 7, config=None, settings=TopicSettings(), rng=random.Random(2)
        )
        created = True
    except PowerLost:
        created = False
    fs.fsync_dir = fsync_dir
    fs.crash()
    again = open_node(fs, peers=None)
    hosted = ("events", 0) in again.partitions
    assert hosted or not created, "a partition whose creation returned survives a crash"
    if hosted:
        assert again.partitions[("events", 0)].meta.incarnation


class PowerLost(Exception):
    pass


def test_a_directory_records_its_node_and_refuses_another_id():
    fs = MemoryFileSystem()
    open_node(fs, node_id=2, peers=PEERS).close()
    with pytest.raises(WrongNodeError, match="belongs to node 2, not to node 3"):
        open_node(fs, node_id=3, peers=None)
    open_node(fs, node_id=2, peers=None).close()


def test_a_directory_of_an_older_version_is_adopted_by_the_node_started_on_it():
    fs = MemoryFileSystem()
    open_node(fs, node_id=2, peers=PEERS).close()
    fs.remove("/data/node")  # as written before directories recorded their node
    open_node(fs, node_id=2, peers=None).close()
    with pytest.raises(WrongNodeError):
        open_node(fs, node_id=1, peers=None)


def test_a_trimmed_log_start_is_kept_with_its_replica_across_a_crash():
    """A restart serves nothing before a trim while the controller's log is applied again
    (the simulation's topic changes once read below it after a restart)."""
    fs = MemoryFileSystem()
    node = open_node(fs, peers=PEERS)
    settings = TopicSettings(retention_ms=3_600_000)
    storage = node.create_partition(
        "events", 0, 7, config=None, settings=settings, rng=random.Random(2)
    )
    node.add("events", 0, storage)
    assert storage.log_floor == 0
    node.keep_settings("events", 0, settings, 12)
    assert storage.log_floor == 12
    fs.crash()
    again = open_node(fs, peers=None)
    kept = again.partitions[("events", 0)]
    assert kept.log_floor == 12
    assert kept.log.config.retention_ms == 3_600_000
    assert again.reopen(kept, random.Random(3)).log_floor == 12
    assert again.partitions[("default", 0)].log_floor == 0
