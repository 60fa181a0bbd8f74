"""Queue mode's window: one lease at a time per record, acks by the holder only, a bounded
window, dead letters after the last delivery, and a replay that rebuilds it exactly."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.consumers.queue import WINDOW_MAX, Lease, RecordState, Settle, SharePartition
from quorumlog.consumers.state import GroupsState, SetMembers, from_wire, to_wire

MAX_DELIVERIES = 3


def queue_group(*members: str) -> GroupsState:
    state = GroupsState()
    join = SetMembers("jobs", "queue", ("work",), 1, tuple((m, 30_000) for m in members), ())
    assert state.apply(join, 0) is None
    return state


def leasable(window: SharePartition, end_offset: int, max_records: int, deliveries_max: int):
    """What a coordinator would lease with every offset up to `end_offset` a record."""
    again = window.redeliverable(max_records, deliveries_max)
    fresh = range(window.next, min(end_offset + 1, window.bound))
    return again + list(fresh)[: max_records - len(again)]


def lease(member: str, *offsets: int) -> Lease:
    return Lease("jobs", "work", 0, member, offsets)


def settle(member: str | None, outcome: str, *offsets: int) -> Settle:
    return Settle("jobs", "work", 0, member, offsets, outcome)


def test_a_record_is_leased_to_one_member_and_acked_by_it_only():
    state = queue_group("a", "b")
    assert state.apply(lease("a", 0, 1), 1) is None
    assert "not available" in state.apply(lease("b", 1), 2), "one lease at a time"
    assert "not leased to member 'b'" in state.apply(settle("b", "ack", 0), 3)
    assert state.apply(settle("a", "ack", 0), 4) is None
    assert "not leased" in state.apply(settle("a", "ack", 0), 5), "no record acked twice"
    window = state.groups["jobs"].queues[("work", 0)]
    assert (window.start, window.next) == (1, 2), "the acked front leaves the window"
    assert state.groups["jobs"].committed == {("work", 0): 1}, "the position is the front"


def test_released_and_expired_records_go_to_another_member_then_to_the_dead_letters():
    window = SharePartition()
    for round_ in range(MAX_DELIVERIES):
        member = "ab"[round_ % 2]
        assert leasable(window, end_offset=0, max_records=10, deliveries_max=3) == [0]
        assert window.lease(lease(member, 0)) is None
        outcome = "release" if round_ % 2 else "expire"
        assert window.settle(settle(member, outcome, 0)) is None
    assert leasable(window, 0, 10, MAX_DELIVERIES) == [], "delivered the most times"
    assert window.exhausted(MAX_DELIVERIES) == [0]
    assert window.settle(settle(None, "dead", 0)) is None
    assert (window.start, window.records) == (1, {}), "settled"


def test_a_full_window_leases_no_new_record_until_its_oldest_settles():
    window = SharePartition()
    first = leasable(
        window, end_offset=10 * WINDOW_MAX, max_records=10 * WINDOW_MAX, deliveries_max=5
    )
    assert len(first) == WINDOW_MAX
    assert window.lease(lease("a", *first)) is None
    assert leasable(window, 10 * WINDOW_MAX, 100, 5) == []
    assert "at most" in window.check_lease((WINDOW_MAX,))
    assert window.settle(settle("a", "ack", 1)) is None
    assert leasable(window, 10 * WINDOW_MAX, 100, 5) == [], "a hole in the middle frees nothing"
    assert window.settle(settle("a", "ack", 0)) is None
    assert leasable(window, 10 * WINDOW_MAX, 100, 5) == [WINDOW_MAX, WINDOW_MAX + 1]


def test_only_members_of_a_queue_group_lease():
    state = queue_group("a")
    assert "not a member" in state.apply(lease("z", 0), 1)
    stream = GroupsState()
    stream.apply(SetMembers("jobs", "stream", ("work",), 1, (("a", 1000),), ()), 0)
    assert "not a queue-mode group" in stream.apply(lease("a", 0), 1)


steps = st.lists(
    st.tuples(
        st.sampled_from(["lease", "ack", "release", "expire", "dead"]), st.sampled_from("ab")
    ),
    max_size=60,
)


@given(steps=steps)
def test_any_history_keeps_the_invariants_and_replays_the_same(steps):
    state = queue_group("a", "b")
    log = []
    acked: set[int] = set()
    offset = 1
    for action, member in steps:
        window = state.groups["jobs"].queues.get(("work", 0)) or SharePartition()
        if action == "lease":
            command = lease(member, *leasable(window, 20, 3, MAX_DELIVERIES))
        elif action == "dead":
            command = settle(None, "dead", *window.exhausted(MAX_DELIVERIES)[:1])
        else:
            mine = window.leased_to(member)[:2]
            command = settle(None if action == "expire" else member, action, *mine)
        if state.apply(command, offset) is None:
            log.append((offset, command))
            if action == "ack":
                assert acked.isdisjoint(command.offsets), "no record acked twice"
                acked.update(command.offsets)
        offset += 1
        window = state.groups["jobs"].queues.get(("work", 0))
        if window is not None:
            assert window.next - window.start <= WINDOW_MAX
            assert all(window.start <= o < window.next for o in window.records)
            front = window.records.get(window.start)
            assert front is None or front.state not in (RecordState.ACKED, RecordState.DEAD)
            for r in window.records.values():
                assert (r.state is RecordState.LEASED) == (r.member is not None)
                assert r.deliveries <= MAX_DELIVERIES
    replayed = queue_group("a", "b")
    for at, command in log:
        wire = msgpack.unpackb(msgpack.packb(to_wire(command)), raw=False)
        assert replayed.apply(from_wire(wire), at) is None
    assert replayed == state


def test_control_records_skipped_by_a_lease_are_settled_and_a_leaving_member_frees_its_leases():
    state = queue_group("a", "b")
    assert state.apply(lease("a", 1, 3), 1) is None, "0 and 2 are leader barriers"
    window = state.groups["jobs"].queues[("work", 0)]
    assert "increase" in window.check_lease((5, 4))
    assert state.apply(settle("a", "ack", 1), 2) is None
    assert window.start == 3, "the barriers around the acked record settle with it"
    alone = SetMembers("jobs", "queue", ("work",), 2, (("b", 30_000),), ())
    assert state.apply(alone, 3) is None
    assert window.redeliverable(10, MAX_DELIVERIES) == [3], "a's lease is free for b"
    assert state.apply(lease("b", 3), 4) is None
