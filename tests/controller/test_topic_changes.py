"""Changes to running topics as the controller's state machine applies them, their wire
forms, the settings' names and values, and where a new replication factor puts replicas."""

from __future__ import annotations

import random
from collections import Counter

import msgpack
import pytest

from quorumlog.consumers.state import DeleteGroup, GroupsState, ResetOffsets, SetMembers
from quorumlog.controller.commands import (
    AddPartitions,
    AlterTopicConfig,
    CommandError,
    CreateTopic,
    TrimPartition,
    from_wire,
    to_wire,
)
from quorumlog.controller.placement import PlacementError, resize
from quorumlog.controller.topic_config import ConfigError, changed_settings, described
from quorumlog.log.config import UNLIMITED, LogConfig, TopicSettings
from tests.controller.test_state import cluster


def roundtrip(command):
    return from_wire(msgpack.unpackb(msgpack.packb(to_wire(command)), raw=False))


def test_new_commands_survive_their_wire_form_and_old_ones_keep_theirs():
    for command in (
        AlterTopicConfig("t", TopicSettings(retention_ms=5).to_wire()),
        AddPartitions("t", 2, ((1, 2), (2, 3))),
        TrimPartition("t", 1, 40),
        CreateTopic("t", ((1, 2),), segment_bytes_max=1 << 20),
    ):
        assert roundtrip(command) == command
    # A create that uses no new field has the wire form an earlier version reads.
    assert set(to_wire(CreateTopic("t", ((1,),)))) == {"type", "name", "replicas"}


@pytest.mark.parametrize(
    "settings",
    [
        [1],
        {"retention_ms": "soon"},
        {"colour": 1},
        {"timestamp_type": "whenever"},
        {"retention_bytes": 0},
    ],
)
def test_bad_settings_are_refused_when_read_not_when_applied(settings):
    with pytest.raises(CommandError, match="bad topic settings"):
        from_wire({"type": "AlterTopicConfig", "name": "t", "settings": settings})


def test_a_grow_applies_once_from_the_count_it_was_decided_on():
    state = cluster()
    state.apply(CreateTopic("t", ((1, 2, 3),)), state.applied_offset + 1)
    grow = AddPartitions("t", 1, ((2, 3, 1), (3, 1, 2)))
    assert state.apply(grow, state.applied_offset + 1) is None
    assert "has 3 partitions now" in state.apply(grow, state.applied_offset + 1)
    topic = state.topics["t"]
    assert [p.partition for p in topic.partitions] == [0, 1, 2]
    assert len({p.group_id for p in topic.partitions}) == 3
    # Grown partitions bootstrap their groups (they were not moved).
    assert not any(state.was_moved(p) for p in topic.partitions)
    assert topic.partitions[1].created_offset > topic.partitions[0].created_offset


def test_settings_and_trims_apply_and_a_trim_never_goes_back():
    state = cluster()
    state.apply(CreateTopic("t", ((1, 2, 3),)), state.applied_offset + 1)
    settings = TopicSettings(retention_ms=UNLIMITED, segment_bytes_max=1 << 20)
    state.apply(AlterTopicConfig("t", settings.to_wire()), state.applied_offset + 1)
    assert state.topics["t"].settings == settings
    assert state.apply(TrimPartition("t", 0, 10), state.applied_offset + 1) is None
    assert "starts at 10 already" in state.apply(TrimPartition("t", 0, 5), state.applied_offset + 1)
    assert state.partition("t", 0).log_start == 10
    assert "no partition 3" in state.apply(TrimPartition("t", 3, 5), state.applied_offset + 1)


def test_settings_by_kafka_names():
    node = LogConfig(retention_ms=3_600_000)
    mine = changed_settings(TopicSettings(), {"retention.bytes": "1048576", "segment.bytes": 65536})
    assert mine == TopicSettings(retention_bytes=1 << 20, segment_bytes_max=65536)
    shown = described(mine, node, append_bytes_max=8 << 20)
    assert shown["retention.ms"] == 3_600_000, "unset: the node's own"
    assert shown["max.message.bytes"] == 8 << 20
    # -1 is no limit, whatever the node's; unsetting goes back to the node's.
    forever = changed_settings(mine, {"retention.ms": "-1"})
    assert described(forever, node, 8 << 20)["retention.ms"] == -1
    assert forever.applied_to(node).retention_ms is None
    back = changed_settings(forever, {"retention.ms": None})
    assert described(back, node, 8 << 20)["retention.ms"] == 3_600_000
    assert changed_settings(mine, {"segment.bytes": 131072}, replace_all=True) == TopicSettings(
        segment_bytes_max=131072
    )
    stamped = changed_settings(TopicSettings(), {"message.timestamp.type": "LogAppendTime"})
    assert stamped.timestamp_type == "log_append"
    for changes, why in (
        ({"retention.nope": 1}, "no topic setting 'retention.nope'"),
        ({"retention.ms": 0}, "-1 \\(no limit\\) or a positive integer"),
        ({"segment.bytes": "1k"}, "segment.bytes is an integer"),
        ({"max.message.bytes": 0}, "max.message.bytes is 1-"),
        ({"message.timestamp.type": "Now"}, "CreateTime or LogAppendTime"),
    ):
        with pytest.raises(ConfigError, match=why):
            changed_settings(TopicSettings(), changes)


def test_resize_keeps_the_leader_and_spreads_the_load():
    sets = {p: (1 + p % 4, 1 + (p + 1) % 4, 1 + (p + 2) % 4) for p in range(8)}
    leaders = {p: 1 + (p + 1) % 4 for p in range(8)}  # after failovers: not the first
    one = resize(sets, 1, [1, 2, 3, 4], leaders)
    assert one == {p: (leaders[p],) for p in range(8)}, "the leader stays: no election"
    two = resize(sets, 2, [1, 2, 3, 4], leaders)
    assert all(leaders[p] in s and len(s) == 2 for p, s in two.items())
    load = Counter(n for s in two.values() for n in s)
    assert max(load.values()) - min(load.values()) <= 1
    four = resize(sets, 4, [1, 2, 3, 4])
    assert all(sorted(s) == [1, 2, 3, 4] and s[:3] == sets[p] for p, s in four.items())
    assert resize(sets, 3, [1, 2, 3, 4]) == {}
    with pytest.raises(PlacementError, match="only 4 nodes are live"):
        resize(sets, 5, [1, 2, 3, 4])


def test_resize_drops_a_dead_nodes_replica_first_and_counts_other_topics():
    assert resize({0: (1, 2, 3)}, 2, [1, 2, 4], {0: 1}) == {0: (1, 2)}
    crowded = [(4,)] * 10  # another topic's load on node 4
    grown = resize({0: (1,)}, 2, [1, 2, 3, 4], existing=[(1,), *crowded])
    assert grown == {0: (1, 2)}
    rng = random.Random(7)
    for _ in range(200):
        nodes = list(range(1, rng.randint(2, 7)))
        sets = {p: tuple(rng.sample(nodes, rng.randint(1, len(nodes)))) for p in range(20)}
        factor = rng.randint(1, len(nodes))
        for p, s in resize(sets, factor, nodes).items():
            assert len(s) == len(set(s)) == factor
            kept, had = set(s), set(sets[p])
            assert kept <= had if factor < len(had) else had <= kept, "only what must change"


def test_a_group_is_deleted_only_without_members():
    state = GroupsState()
    state.apply(SetMembers("g", "stream", ("t",), 1, (("m", 10_000),), ()), 0)
    assert "active members" in state.apply(DeleteGroup("g"), 1)
    state.apply(SetMembers("g", "stream", ("t",), 2, (), ()), 2)
    assert state.apply(DeleteGroup("g"), 3) is None
    assert "g" not in state.groups
    assert "unknown group" in state.apply(DeleteGroup("g"), 4)
    state.apply(ResetOffsets("h", (("t", 0, 5),)), 5)
    assert state.apply(DeleteGroup("h"), 6) is None
