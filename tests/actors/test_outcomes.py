"""Outcomes nobody takes do not pile up (issue 51)."""

from quorumlog.actors.replica.outcomes import KEPT, Outcomes


def test_the_caller_takes_its_outcome_and_the_unclaimed_oldest_go():
    outcomes = Outcomes()
    outcomes.put(0, "topic 'a' exists")
    assert outcomes.take(0) == "topic 'a' exists" and outcomes.take(0) is None
    for offset in range(1, 3 * KEPT):
        outcomes.put(offset, None if offset % 2 else "refused")
    assert len(outcomes) == KEPT
    assert outcomes.take(3 * KEPT - 2) == "refused", "the newest stay"
    assert outcomes.take(2) is None, "the oldest went"
