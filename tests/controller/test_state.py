"""The controller's state machine: commands applied in log order, and the one-line reasons
a topic call is refused."""

from __future__ import annotations

import msgpack
import pytest

from quorumlog.controller.commands import (
    CommandError,
    CreateTopic,
    DeleteTopic,
    EndRebalance,
    NameCluster,
    RegisterBroker,
    SetReplicas,
    StartRebalance,
    from_wire,
    to_wire,
)
from quorumlog.controller.state import (
    CONTROLLER_GROUP,
    ClusterState,
    TopicError,
    check_create,
    check_delete,
    check_topic_name,
)

COMMANDS = [
    RegisterBroker(1, "127.0.0.1:7001"),
    CreateTopic("events", ((1, 2, 3), (2, 3, 1)), retention_bytes=1 << 20),
    DeleteTopic("events"),
    SetReplicas("events", 1, (3, 1, 4)),
    NameCluster("3f2a9c0d41e7b865"),
    StartRebalance("node 4 joined"),
    EndRebalance((1, 2, 3, 4)),
]


def cluster(brokers: int = 3) -> ClusterState:
    state = ClusterState()
    for i in range(1, brokers + 1):
        state.apply(RegisterBroker(i, f"127.0.0.1:{7000 + i}"), state.applied_offset + 1)
    return state


def test_commands_survive_their_wire_form():
    for command in COMMANDS:
        wire = msgpack.unpackb(msgpack.packb(to_wire(command)), raw=False)
        assert from_wire(wire) == command


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        ([1, 2], "a command is a map"),
        ({"type": "Launch"}, "unknown command type 'Launch'"),
        ({"type": "DeleteTopic", "name": "x", "force": True}, "unknown fields"),
        ({"type": "DeleteTopic"}, "bad DeleteTopic"),
    ],
)
def test_malformed_commands_are_refused(wire, why):
    with pytest.raises(CommandError, match=why):
        from_wire(wire)


def test_topics_get_consecutive_groups_and_revisions_from_the_log():
    state = cluster()
    assert state.apply(CreateTopic("a", ((1, 2), (2, 3))), 10) is None
    assert state.apply(CreateTopic("b", ((3, 1),)), 11) is None
    groups = [p.group_id for t in state.topics.values() for p in t.partitions]
    assert groups == [1, 2, 3] and CONTROLLER_GROUP not in groups
    assert state.partition("a", 1).revision == 10
    assert [p.topic for p in state.groups_of(3)] == ["a", "b"]
    assert state.apply(SetReplicas("a", 1, (2, 1)), 12) is None
    moved = state.partition("a", 1)
    assert (moved.replicas, moved.revision, moved.group_id) == ((2, 1), 12, 2)
    assert state.was_moved(moved) and not state.was_moved(state.partition("a", 0))


def test_a_command_that_lost_a_race_changes_nothing_and_says_why():
    state = cluster()
    state.apply(CreateTopic("a", ((1,),)), 10)
    assert state.apply(CreateTopic("a", ((2,),)), 11) == "topic 'a' exists"
    assert state.partition("a", 0).replicas == (1,)
    assert state.apply(DeleteTopic("zz"), 12) == "unknown topic 'zz'"
    assert "no partition 5" in state.apply(SetReplicas("a", 5, (1,)), 13)


def test_the_first_name_of_the_cluster_stands():
    state = cluster()
    assert state.cluster_id is None
    assert state.apply(NameCluster("aaaa"), 10) is None
    assert state.apply(NameCluster("bbbb"), 11) == "the cluster is named aaaa already"
    assert state.cluster_id == "aaaa"


def test_a_rebalance_starts_once_and_ends_once_over_the_brokers_it_balanced():
    state = cluster()
    assert state.rebalance.brokers is None and not state.rebalance.under_way
    assert state.apply(EndRebalance((1, 2, 3)), 10) is None, "the baseline of a new cluster"
    assert state.rebalance.brokers == (1, 2, 3)
    assert state.apply(EndRebalance((1, 2, 3)), 11) == "no rebalance is under way"
    assert state.apply(StartRebalance("node 4 joined"), 12) is None
    assert state.apply(StartRebalance("asked"), 13) == "a rebalance is under way"
    assert state.rebalance.under_way and state.rebalance.started_offset == 12
    assert state.apply(EndRebalance((1, 2, 3, 4)), 14) is None
    assert not state.rebalance.under_way and state.rebalance.brokers == (1, 2, 3, 4)
    assert state.rebalance.reason == "node 4 joined"


def test_a_deleted_topic_created_again_gets_new_groups():
    state = cluster()
    state.apply(CreateTopic("a", ((1,),)), 10)
    state.apply(DeleteTopic("a"), 11)
    state.apply(CreateTopic("a", ((1,),)), 12)
    assert state.partition("a", 0).group_id == 2


def test_a_broker_at_a_new_address_gets_a_new_epoch():
    state = cluster(1)
    state.apply(RegisterBroker(1, "127.0.0.1:7001"), 5)
    assert state.brokers[1].epoch == 0
    state.apply(RegisterBroker(1, "127.0.0.1:9001"), 6)
    assert (state.brokers[1].address, state.brokers[1].epoch) == ("127.0.0.1:9001", 1)


def test_a_departed_broker_keeps_its_address_for_the_partitions_placed_on_it():
    """A topic grown onto node 3 just before node 3 left: the nodes that make its replicas
    after both applied bootstrap it with node 3's address (they once crashed on it)."""
    state = cluster(3)
    state.apply(CreateTopic("a", ((3, 1, 2),)), 10)
    state.set_brokers({1: "127.0.0.1:7001", 2: "127.0.0.1:7002"})
    assert 3 not in state.brokers
    assert state.addresses[3] == "127.0.0.1:7003"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("events", 3, 3), "topic 'events' exists"),
        (("new", 3, 4), "4 replicas asked for but the cluster has 3 nodes"),
        (("new", 0, 1), "1-10000 partitions, not 0"),
        (("new", 100_000, 1), "1-10000 partitions, not 100000"),
        (("new", 1, 0), "at least one replica"),
        (("bad name", 1, 1), "bad topic name"),
        (("x" * 201, 1, 1), "1-200 characters"),
        (("", 1, 1), "1-200 characters"),
        (("__groups", 1, 1), "internal"),
    ],
)
def test_impossible_topics_are_refused_with_one_line(args, why):
    state = cluster()
    state.apply(CreateTopic("events", ((1, 2, 3),)), 10)
    with pytest.raises(TopicError, match=why) as raised:
        check_create(state, *args)
    assert "\n" not in str(raised.value)


def test_retention_and_timestamp_type_are_checked():
    state = cluster()
    with pytest.raises(TopicError, match="retention bytes must be a positive integer"):
        check_create(state, "t", 1, 1, retention_bytes=0)
    with pytest.raises(TopicError, match="timestamps are one of create, log_append"):
        check_create(state, "t", 1, 1, timestamp_type="wall")
    check_create(state, "t", 1, 1, retention_ms=60_000, timestamp_type="log_append")


def test_default_cannot_be_deleted_and_unknown_topics_are_named():
    state = cluster()
    with pytest.raises(TopicError, match="'default' cannot be deleted"):
        check_delete(state, "default")
    with pytest.raises(TopicError, match="unknown topic 'nope'"):
        check_delete(state, "nope")
    assert check_topic_name("__groups", internal=True) == "__groups"
