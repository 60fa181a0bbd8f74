"""The `__groups` state machine: members that left are fenced, positions never go back
except by a reset with no member active, and commands survive their wire form."""

from __future__ import annotations

import msgpack
import pytest

from quorumlog.consumers.queue import Lease, RecordState, Settle
from quorumlog.consumers.state import (
    CommandError,
    Commit,
    DeleteOffsets,
    EndTxnOffsets,
    ForgetTopics,
    GroupError,
    GroupsState,
    RecordOffsets,
    ResetOffsets,
    SetMembers,
    Snapshot,
    TxnOffsets,
    check_group_name,
    check_member_settings,
    from_wire,
    groups_partition,
    held_offsets,
    snapshot_of,
    to_wire,
)

JOIN = SetMembers(
    "billing",
    "stream",
    ("events",),
    1,
    (("m1", 10_000), ("m2", 10_000)),
    (("m1", (("events", 0),)), ("m2", (("events", 1),))),
)


def state_with_members() -> GroupsState:
    state = GroupsState()
    assert state.apply(JOIN, 0) is None
    return state


def test_commands_survive_their_wire_form():
    for command in (
        JOIN,
        Commit("g", "m1", (("t", 0, 42),)),
        ResetOffsets("g", (("t", 1, 0),)),
        DeleteOffsets("g", (("t", 1),)),
        ForgetTopics(("t", "u")),
        RecordOffsets((("t", 0, ((5, 3), (9, 6))),)),
        Snapshot(({"name": "g"},)[:0], records=True),
        TxnOffsets("g", 7, (("t", 0, 3),)),
        EndTxnOffsets(7, commit=False),
    ):
        wire = msgpack.unpackb(msgpack.packb(to_wire(command)), raw=False)
        assert from_wire(wire) == command


@pytest.mark.parametrize(
    "wire",
    [[], {"type": "Nope"}, {"type": "Commit", "group": "g"}, {**to_wire(JOIN), "members": [[1]]}],
)
def test_a_malformed_command_is_refused(wire):
    with pytest.raises(CommandError):
        from_wire(wire)


def test_an_owner_commits_and_positions_only_go_forward():
    state = state_with_members()
    assert state.apply(Commit("billing", "m1", (("events", 0, 10),)), 1) is None
    assert state.groups["billing"].committed == {("events", 0): 10}
    why = state.apply(Commit("billing", "m1", (("events", 0, 5),)), 2)
    assert why is not None and "never goes back" in why
    assert state.groups["billing"].committed == {("events", 0): 10}


def test_a_member_that_left_is_fenced_and_generations_apply_once():
    state = state_with_members()
    assert "rejoin" in state.apply(Commit("billing", "m9", (("events", 0, 3),)), 1)
    assert "not after" in state.apply(JOIN, 2), "a generation is applied once"
    alone = SetMembers("billing", "stream", ("events",), 2, (("m2", 10_000),), ())
    assert state.apply(alone, 3) is None
    assert "rejoin" in state.apply(Commit("billing", "m1", (("events", 0, 3),)), 4)
    assert state.groups["billing"].committed == {}


def test_reset_is_refused_while_members_are_active():
    state = state_with_members()
    assert state.apply(Commit("billing", "m1", (("events", 0, 10),)), 1) is None
    assert "active members" in state.apply(ResetOffsets("billing", (("events", 0, 0),)), 2)
    empty = SetMembers("billing", "stream", ("events",), 2, (), ())
    assert state.apply(empty, 3) is None
    assert state.apply(ResetOffsets("billing", (("events", 0, 0),)), 4) is None
    assert state.groups["billing"].committed == {("events", 0): 0}


def test_replaying_the_log_rebuilds_the_same_state():
    commands = [
        JOIN,
        Commit("billing", "m1", (("events", 0, 10),)),
        Commit("billing", "m2", (("events", 1, 7),)),
        Commit("billing", "m2", (("events", 1, 3),)),  # refused: goes back
    ]
    first, second = GroupsState(), GroupsState()
    for offset, command in enumerate(commands):
        first.apply(command, offset)
        second.apply(from_wire(msgpack.unpackb(msgpack.packb(to_wire(command)))), offset)
    assert first == second
    assert first.groups["billing"].committed == {("events", 0): 10, ("events", 1): 7}


def test_names_and_settings_are_checked():
    assert check_group_name("billing") == "billing"
    for bad in ("", "x" * 201, "tab\there"):
        with pytest.raises(GroupError):
            check_group_name(bad)
    check_member_settings("queue", 30_000)
    with pytest.raises(GroupError, match="session timeout"):
        check_member_settings("stream", 0)
    with pytest.raises(GroupError, match="mode"):
        check_member_settings("fanout", 1000)


def test_a_group_always_maps_to_the_same_groups_partition():
    assert groups_partition("billing", 3) == groups_partition("billing", 3)
    assert {groups_partition(f"g{i}", 3) for i in range(30)} == {0, 1, 2}


def test_offsets_are_deleted_except_of_a_topic_active_members_consume():
    """Kafka's OffsetDelete: refused for the topics of an active member's subscription."""
    state = state_with_members()
    state.apply(Commit("billing", "m1", (("events", 0, 7),)), 1)
    state.apply(ResetOffsets("other", (("events", 0, 3), ("audit", 0, 9))), 2)
    why = state.apply(DeleteOffsets("billing", (("events", 0),)), 3)
    assert why == "group 'billing' has active members consuming events"
    assert state.groups["billing"].committed == {("events", 0): 7}
    assert state.apply(DeleteOffsets("other", (("audit", 0), ("audit", 5))), 4) is None
    assert state.groups["other"].committed == {("events", 0): 3}
    assert state.apply(DeleteOffsets("nobody", (("audit", 0),)), 5) == "unknown group 'nobody'"


def test_a_deleted_topics_positions_and_windows_leave_every_group():
    """ForgetTopics: whatever the groups' members, the topics' positions and queue windows
    go; other topics' stay."""
    state = state_with_members()
    state.apply(Commit("billing", "m1", (("events", 0, 7),)), 1)
    state.apply(ResetOffsets("other", (("events", 1, 3), ("audit", 0, 9))), 2)
    state.apply(SetMembers("jobs", "queue", ("events", "audit"), 1, (("q", 10_000),), ()), 3)
    state.apply(Lease("jobs", "events", 0, "q", (0, 1)), 4)
    state.apply(Lease("jobs", "audit", 0, "q", (0,)), 5)
    assert state.apply(ForgetTopics(("events", "never")), 6) is None
    assert state.groups["billing"].committed == {}
    assert state.groups["other"].committed == {("audit", 0): 9}
    assert list(state.groups["jobs"].queues) == [("audit", 0)]
    assert held_offsets(state) == {("audit", 0): {0, 1, 9}}
    assert state.groups["billing"].members  # groups and their subscriptions stay


def test_positions_kept_by_0_4_are_turned_into_record_offsets_once():
    """0.4's offsets were log positions: RecordOffsets maps every one the state holds,
    committed positions and queue windows alike, and a snapshot says which it counts."""
    state = state_with_members()
    state.apply(Commit("billing", "m1", (("events", 0, 9),)), 1)
    queue = SetMembers("jobs", "queue", ("events",), 1, (("q", 10_000),), ())
    state.apply(queue, 2)
    state.apply(Lease("jobs", "events", 1, "q", (1, 2, 4)), 3)  # 3: a barrier, skipped
    state.apply(Settle("jobs", "events", 1, "q", (1,), "ack"), 4)
    assert not state.records
    held = held_offsets(state)
    assert held == {("events", 0): {9}, ("events", 1): {2, 4, 5}}
    # events/0: positions 0 and 5 were barriers; events/1: 0 and 3.
    turned = RecordOffsets((("events", 0, ((9, 7),)), ("events", 1, ((2, 1), (4, 2), (5, 3)))))
    assert state.apply(turned, 5) is None
    assert state.records
    assert state.groups["billing"].committed == {("events", 0): 7}
    window = state.groups["jobs"].queues[("events", 1)]
    assert (window.start, window.next, sorted(window.records)) == (1, 3, [1, 2])
    assert window.records[2].state is RecordState.LEASED
    assert state.apply(turned, 6) == "its offsets count records already"
    restored = GroupsState()
    restored.apply(from_wire(msgpack.unpackb(msgpack.packb(to_wire(snapshot_of(state))))), 0)
    assert restored.records and restored.groups["jobs"].queues == state.groups["jobs"].queues


def test_a_snapshot_of_0_4_counts_positions():
    wire = to_wire(Snapshot(()))
    del wire["records"]  # 0.4 wrote none
    state = GroupsState(records=True)
    state.apply(from_wire(wire), 0)
    assert not state.records


def test_a_transactions_positions_count_once_it_commits_and_never_if_it_aborts():
    """TxnOffsets holds a transaction's positions apart; EndTxnOffsets of its producer
    commits them to every group it wrote to, or drops them; other producers' stay held;
    a deleted topic's held positions go too; a snapshot keeps them (one of before
    transactions has none)."""
    state = GroupsState()
    assert state.apply(ResetOffsets("copier", (("orders", 0, 5),)), 0) is None
    assert state.apply(TxnOffsets("copier", 7, (("orders", 0, 9), ("orders", 1, 4))), 1) is None
    assert state.apply(TxnOffsets("copier", 8, (("orders", 0, 12),)), 2) is None
    assert state.apply(TxnOffsets("audit", 7, (("orders", 0, 3),)), 3) is None
    assert state.groups["copier"].committed == {("orders", 0): 5}, "held apart until the end"
    rebuilt = GroupsState()
    rebuilt.apply(from_wire(msgpack.unpackb(msgpack.packb(to_wire(snapshot_of(state))))), 0)
    assert {n: g.pending for n, g in rebuilt.groups.items()} == {
        n: g.pending for n, g in state.groups.items()
    }
    assert state.apply(EndTxnOffsets(7, commit=True), 4) is None
    assert state.groups["copier"].committed == {("orders", 0): 9, ("orders", 1): 4}
    assert state.groups["audit"].committed == {("orders", 0): 3}
    assert state.apply(EndTxnOffsets(8, commit=False), 5) is None
    assert state.groups["copier"].committed == {("orders", 0): 9, ("orders", 1): 4}
    assert all(not g.pending for g in state.groups.values())
    state.apply(TxnOffsets("copier", 9, (("orders", 0, 20), ("audit", 0, 1))), 6)
    state.apply(ForgetTopics(("orders",)), 7)
    assert state.groups["copier"].pending == {9: {("audit", 0): 1}}
    old = to_wire(snapshot_of(state))
    for group in old["groups"]:
        del group["pending"]
    restored = GroupsState()
    assert restored.apply(from_wire(old), 0) is None
    assert all(not g.pending for g in restored.groups.values())
