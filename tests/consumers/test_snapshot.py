"""A `__groups` snapshot holds a partition's whole state: applied to an empty state (or to
one that applied only the tail of a compacted log) it gives the state every command before
it built; commands before the first snapshot of a compacted log are ignored."""

from __future__ import annotations

import msgpack
import pytest

from quorumlog.consumers.queue import Lease, Settle
from quorumlog.consumers.state import (
    CommandError,
    Commit,
    GroupsState,
    SetMembers,
    Snapshot,
    from_wire,
    snapshot_of,
    to_wire,
)

STREAM = SetMembers(
    "billing", "stream", ("events",), 1, (("m1", 10_000),), (("m1", (("events", 0),)),)
)
QUEUE = SetMembers("jobs", "queue", ("work",), 1, (("w1", 10_000), ("w2", 10_000)), ())
COMMANDS = [
    STREAM,
    Commit("billing", "m1", (("events", 0, 42),)),
    QUEUE,
    Lease("jobs", "work", 0, "w1", (0, 1, 2)),
    Lease("jobs", "work", 0, "w2", (3,)),
    Settle("jobs", "work", 0, "w1", (0, 2), "ack"),
    Settle("jobs", "work", 0, "w1", (1,), "release"),
]


def built() -> GroupsState:
    state = GroupsState()
    for offset, command in enumerate(COMMANDS):
        assert state.apply(command, offset) is None
    return state


def built_then(*commands) -> GroupsState:
    state = built()
    for offset, command in enumerate(commands, start=len(COMMANDS)):
        assert state.apply(command, offset) is None
    return state


def through_the_wire(command):
    return from_wire(msgpack.unpackb(msgpack.packb(to_wire(command), use_bin_type=True)))


def test_a_snapshot_restores_every_group_with_its_windows():
    state = built()
    restored = GroupsState(whole=False)
    assert restored.apply(through_the_wire(snapshot_of(state)), 100) is None
    assert restored.whole and restored.groups == state.groups
    window = restored.groups["jobs"].queues[("work", 0)]
    assert (window.start, window.next) == (1, 4)
    assert window.leased_to("w2") == [3] and window.redeliverable(10, 5) == [1]
    # The restored state goes on as the original does.
    for s in (state, restored):
        assert s.apply(Settle("jobs", "work", 0, "w2", (3,), "ack"), 101) is None
    assert restored.groups == state.groups


def test_commands_before_the_first_snapshot_of_a_compacted_log_change_nothing():
    state = GroupsState(whole=False)
    assert state.apply(Commit("billing", "m1", (("events", 0, 7),)), 5) is not None
    assert state.apply(STREAM, 6) is not None and not state.groups
    state.apply(through_the_wire(snapshot_of(built())), 7)
    assert state.groups["billing"].committed == {("events", 0): 42}
    assert state.apply(Commit("billing", "m1", (("events", 0, 50),)), 8) is None


@pytest.mark.parametrize(
    "groups",
    [[{"name": "g"}], ["not a map"], [{**to_wire(snapshot_of(built()))["groups"][0], "queues": 5}]],
)
def test_a_malformed_snapshot_is_refused_as_it_is_read(groups):
    with pytest.raises(CommandError):
        from_wire({"type": "Snapshot", "groups": groups})


def test_an_empty_state_snapshots_to_nothing():
    assert snapshot_of(GroupsState()) == Snapshot(())


def test_a_snapshot_keeps_the_live_groups_and_windows():
    """The coordinator holds a group and its windows across awaits: applying a snapshot
    of the same state writes into those objects, so what is applied after it shows there
    (a lease decided from a replaced copy named offsets the window had left behind)."""
    state = built()
    group = state.groups["jobs"]
    window = group.queues[("work", 0)]
    assert state.apply(through_the_wire(snapshot_of(state)), 100) is None
    assert state.groups["jobs"] is group and group.queues[("work", 0)] is window
    assert state.apply(Lease("jobs", "work", 0, "w1", (1, 4)), 101) is None
    assert window.next == 5 and window.leased_to("w1") == [1, 4]
    assert window.redeliverable(10, 5) == []
    assert state.groups == built_then(Lease("jobs", "work", 0, "w1", (1, 4))).groups


def test_a_snapshot_drops_groups_it_does_not_hold():
    state = built()
    empty = GroupsState()
    assert state.apply(snapshot_of(empty), 100) is None
    assert state.groups == {}
