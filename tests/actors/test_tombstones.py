"""A replica moved off a node is tombstoned (Kudu's TOMBSTONED): its log goes, its term and
vote stay, a restart half-way finishes the deletion and never opens it again, and a
replica placed there again starts from that term and vote."""

from __future__ import annotations

import os
import random

from quorumlog.actors.services.storage import MetadataStore, TopicSettings, group_dirs
from quorumlog.actors.services.tombstones import TOMBSTONE_FILE
from quorumlog.log.memdisk import MemoryFileSystem
from tests.actors.test_storage import PEERS, open_node

FOLDER = "/data/topics/t/0"


def node_with_a_voted_replica(fs: MemoryFileSystem):
    node = open_node(fs, peers=PEERS)
    storage = node.create_partition(
        "t", 0, 7, config=None, settings=TopicSettings(), rng=random.Random(2)
    )
    storage.store.save(storage.meta.with_vote(5, 3))
    node.add("t", 0, storage)
    return node


def test_a_tombstone_keeps_term_and_vote_and_the_next_replica_starts_from_them():
    fs = MemoryFileSystem()
    node = node_with_a_voted_replica(fs)
    node.bury("t", 0, node.pop("t", 0))
    assert fs.exists(os.path.join(FOLDER, TOMBSTONE_FILE)) and not fs.exists(f"{FOLDER}/log")
    node.close()

    again = open_node(fs, peers=None)
    assert ("t", 0) not in again.partitions and again.tombstones == {("t", 0): 7}
    assert ("t", 0, FOLDER) not in group_dirs(fs, "/data"), "offline tools skip it"
    placed = again.create_partition(
        "t", 0, 7, config=None, settings=TopicSettings(), rng=random.Random(3)
    )
    assert (placed.meta.current_term, placed.meta.voted_for) == (5, 3)
    assert not again.tombstones and not fs.exists(os.path.join(FOLDER, TOMBSTONE_FILE))


def test_a_restart_half_way_through_finishes_the_deletion():
    fs = MemoryFileSystem()
    node = node_with_a_voted_replica(fs)
    storage = node.pop("t", 0)
    storage.log.close()
    fs.open(os.path.join(FOLDER, TOMBSTONE_FILE), create=True).append(b'{"group_id": 7}')
    fs.fsync_dir(FOLDER)
    node.close()
    again = open_node(fs, peers=None)
    assert ("t", 0) not in again.partitions and not fs.exists(f"{FOLDER}/log")
    assert MetadataStore(fs, FOLDER).load().current_term == 5


def test_a_replica_of_another_group_carries_nothing_and_a_deleted_topic_leaves_nothing():
    fs = MemoryFileSystem()
    node = node_with_a_voted_replica(fs)
    node.bury("t", 0, node.pop("t", 0))
    fresh = node.create_partition(
        "t", 0, 9, config=None, settings=TopicSettings(), rng=random.Random(4)
    )
    assert fresh.meta.current_term == 0, "a topic of the same name made again is new"
    node.add("t", 0, fresh)
    node.bury("t", 0, node.pop("t", 0))
    node.remove_tombstone("t", 0)
    assert not fs.exists("/data/topics/t")
