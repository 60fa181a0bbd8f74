"""The server-side assignors of Kafka's consumer group protocol (KIP-848), pure."""

from __future__ import annotations

from quorumlog.consumers.server_assignors import RANGE, UNIFORM, assign


def counts(assignment: dict) -> list[int]:
    return sorted(len(tps) for tps in assignment.values())


def test_uniform_balances_and_keeps_what_a_member_holds():
    two = assign(UNIFORM, {"a": {"t"}, "b": {"t"}}, {"t": 4}, {})
    assert counts(two) == [2, 2]
    assert two["a"] | two["b"] == {("t", p) for p in range(4)}
    three = assign(UNIFORM, {"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 4}, two)
    assert counts(three) == [1, 1, 2]
    assert three["a"] <= two["a"] and three["b"] <= two["b"]  # only what c needs moves
    alone = assign(UNIFORM, {"b": {"t"}}, {"t": 4}, three)
    assert alone == {"b": frozenset(("t", p) for p in range(4))}


def test_uniform_gives_each_topic_to_its_subscribers_only():
    out = assign(UNIFORM, {"a": {"x", "y"}, "b": {"y"}}, {"x": 2, "y": 2, "z": 5}, {})
    assert out["b"] <= {("y", 0), ("y", 1)}
    assert out["a"] | out["b"] == {("x", 0), ("x", 1), ("y", 0), ("y", 1)}
    assert counts(out) == [2, 2]
    assert assign(UNIFORM, {"a": {"gone"}}, {"t": 1}, {}) == {"a": frozenset()}


def test_range_gives_consecutive_partitions_first_members_one_more():
    out = assign(RANGE, {"b": {"t", "u"}, "a": {"t", "u"}}, {"t": 5, "u": 5}, {})
    assert out["a"] == {("t", 0), ("t", 1), ("t", 2), ("u", 0), ("u", 1), ("u", 2)}
    assert out["b"] == {("t", 3), ("t", 4), ("u", 3), ("u", 4)}
    only_u = assign(RANGE, {"a": {"t"}, "b": {"u"}}, {"t": 2, "u": 2}, {})
    assert only_u == {"a": {("t", 0), ("t", 1)}, "b": {("u", 0), ("u", 1)}}
