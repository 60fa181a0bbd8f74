"""The addresses of the members a cluster was named among are in the controller's log
(seed 40004): their first configuration is kept nowhere else, so a node that replays the
log after they left must still know where they are, as a node that never restarted does.
Its mover asks a departed node that still leads a partition it must move."""

from __future__ import annotations

import msgpack
import pytest

from quorumlog.controller.commands import CommandError, NameCluster, from_wire, to_wire
from quorumlog.controller.state import ClusterState

FIRST = ((1, "127.0.0.1:7001"), (2, "127.0.0.1:7002"), (3, "127.0.0.1:7003"))


def test_a_replay_after_the_first_members_left_knows_their_addresses_as_one_that_never_restarted():
    stayed = ClusterState()
    stayed.set_brokers(dict(FIRST))  # the first configuration, never in the log
    stayed.apply(NameCluster("aaaa", FIRST), 1)
    stayed.set_brokers({3: "127.0.0.1:7003"})  # 1 and 2 removed: a config batch
    restarted = ClusterState()
    restarted.set_brokers({3: "127.0.0.1:7003"})  # the committed configuration, stored
    restarted.apply(NameCluster("aaaa", FIRST), 1)
    assert restarted.addresses == stayed.addresses == dict(FIRST)
    assert sorted(restarted.brokers) == sorted(stayed.brokers) == [3]


def test_later_addresses_stand_and_a_second_name_changes_nothing():
    state = ClusterState()
    state.set_brokers({1: "10.0.0.1:7001"})  # node 1 moved since the cluster was named
    state.apply(NameCluster("aaaa", FIRST), 1)
    assert state.addresses[1] == "10.0.0.1:7001" and state.addresses[2] == "127.0.0.1:7002"
    assert state.apply(NameCluster("bbbb", ((9, "127.0.0.1:7009"),)), 2) is not None
    assert 9 not in state.addresses


def test_the_addresses_survive_their_wire_form_and_bad_ones_are_refused():
    command = NameCluster("aaaa", FIRST)
    wire = msgpack.unpackb(msgpack.packb(to_wire(command)), raw=False)
    assert from_wire(wire) == command
    assert "addresses" not in to_wire(NameCluster("aaaa")), "as a node of the release before"
    with pytest.raises(CommandError, match="pairs"):
        from_wire({"type": "NameCluster", "cluster_id": "a", "addresses": [["1", "x"]]})
    with pytest.raises(CommandError, match="pairs"):
        from_wire({"type": "NameCluster", "cluster_id": "a", "addresses": [1]})
