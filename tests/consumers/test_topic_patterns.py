"""Topic patterns of regex subscriptions: what is matched, and what is refused."""

from __future__ import annotations

import pytest

from quorumlog.consumers.topic_patterns import PatternRefused, compile_pattern


@pytest.mark.parametrize(
    "pattern",
    ["(^orders-.*)", "^(prod|stage)-[a-z]+-.*", "[a-z]+\\.[a-z]+\\..*", "(a|b)*-x", "t{2,5}"],
)
def test_usual_patterns_are_taken(pattern):
    assert compile_pattern(pattern).pattern == pattern


@pytest.mark.parametrize(
    "pattern, why",
    [
        ("(", "missing"),
        ("(a+)+$", "a repeat inside a repeat"),
        ("(ab|a)*c", "an alternation inside a repeat"),
        (".*.*.*.*x", "more than 3 unbounded repeats"),
        ("(a)\\1", "backreferences and lookarounds"),
        ("a(?=b)", "backreferences and lookarounds"),
        ("a" * 1001, "longer than 1000"),
    ],
)
def test_patterns_that_could_take_too_long_or_do_not_compile_are_refused(pattern, why):
    with pytest.raises(PatternRefused, match=why.replace("(", "\\(")):
        compile_pattern(pattern)


def test_a_pattern_matches_whole_names():
    pattern = compile_pattern("orders-.*")
    assert pattern.fullmatch("orders-eu") and not pattern.fullmatch("old-orders-eu")
