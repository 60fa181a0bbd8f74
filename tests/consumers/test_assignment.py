"""Sticky assignment: balanced, every partition once, and as few moves as possible."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from quorumlog.consumers.assignment import assign


def tps(n: int, topic: str = "t") -> list[tuple[str, int]]:
    return [(topic, p) for p in range(n)]


def moved(before: dict[str, tuple], after: dict[str, tuple]) -> int:
    """How many partitions changed owner (a partition new or gone counts too)."""
    owner_before = {tp: m for m, owned in before.items() for tp in owned}
    owner_after = {tp: m for m, owned in after.items() for tp in owned}
    return sum(
        owner_before.get(tp) != owner_after.get(tp) for tp in owner_before.keys() | owner_after
    )


def check_valid(assignment, partitions, members) -> None:
    owned = [tp for tps_ in assignment.values() for tp in tps_]
    assert sorted(owned) == sorted(partitions), "every partition exactly once"
    assert set(assignment) == set(members)
    counts = [len(v) for v in assignment.values()]
    assert max(counts) - min(counts) <= 1, "balanced"


def test_a_joining_member_takes_only_its_share_from_the_others():
    before = assign(tps(6), ["a", "b"])
    after = assign(tps(6), ["a", "b", "c"], before)
    check_valid(after, tps(6), "abc")
    assert moved(before, after) == 2, "c takes one from each; nothing else moves"
    assert set(after["a"]) <= set(before["a"]) and set(after["b"]) <= set(before["b"])


def test_a_leaving_member_hands_over_only_its_own():
    before = assign(tps(6), ["a", "b", "c"])
    after = assign(tps(6), ["a", "c"], before)
    check_valid(after, tps(6), "ac")
    assert moved(before, after) == len(before["b"])
    assert set(before["a"]) <= set(after["a"]) and set(before["c"]) <= set(after["c"])


def test_no_member_no_assignment_and_more_members_than_partitions():
    assert assign(tps(3), []) == {}
    result = assign(tps(2), ["a", "b", "c"])
    check_valid(result, tps(2), "abc")
    assert sorted(len(v) for v in result.values()) == [0, 1, 1]


memberships = st.lists(st.sets(st.sampled_from("abcdefgh"), min_size=1), min_size=1, max_size=6)


@given(partitions=st.integers(0, 30), steps=memberships, topics=st.integers(1, 3))
def test_every_rebalance_is_valid_sticky_and_the_same_everywhere(partitions, steps, topics):
    wanted = [tp for t in range(topics) for tp in tps(partitions, f"t{t}")]
    current: dict = {}
    for members in steps:
        after = assign(wanted, members, current)
        check_valid(after, wanted, members)
        assert assign(reversed(wanted), sorted(members, reverse=True), current) == after
        # A member that stays keeps what it held, up to its share.
        share = len(wanted) // len(members)
        for m in members & current.keys():
            assert len(set(current[m]) & set(after[m])) >= min(len(current[m]), share)
        current = after
