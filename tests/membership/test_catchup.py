"""The promotion rule (Raft dissertation 4.2.1) and the replication rate estimator."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.membership.catchup import (
    RATE_SAMPLES_MAX,
    ReplicationRate,
    catch_up_time_s,
    is_caught_up,
)

ELECTION_TIMEOUT_S = 0.3


def test_a_learner_at_the_leaders_offset_is_caught_up_even_when_idle():
    assert is_caught_up(100, 100, 100, offsets_per_s=0.0, election_timeout_s=ELECTION_TIMEOUT_S)


def test_a_lagging_learner_that_makes_no_progress_is_not():
    assert catch_up_time_s(100, 50, 50, offsets_per_s=0.0) == math.inf
    assert not is_caught_up(100, 50, 50, offsets_per_s=0.0, election_timeout_s=10.0)


def test_lag_within_one_election_timeout_at_the_recent_rate():
    # 1000 offsets/s: 300 offsets behind take 0.3 s, exactly the election timeout.
    assert is_caught_up(1300, 1000, 1000, offsets_per_s=1000.0, election_timeout_s=0.3)
    assert not is_caught_up(1301, 1000, 1000, offsets_per_s=1000.0, election_timeout_s=0.3)


def test_the_flushed_offset_counts_not_only_the_match():
    # Matched everything but flushed little: as a voter it would hold commits back.
    assert catch_up_time_s(1000, 1000, 400, offsets_per_s=1000.0) == pytest.approx(0.6)
    assert not is_caught_up(1000, 1000, 400, offsets_per_s=1000.0, election_timeout_s=0.3)


def test_a_learner_ahead_of_the_leaders_dirty_offset_is_caught_up():
    assert catch_up_time_s(10, 12, 12, offsets_per_s=0.0) == 0.0


def test_an_empty_learner_of_an_empty_log():
    assert is_caught_up(-1, -1, -1, offsets_per_s=0.0, election_timeout_s=ELECTION_TIMEOUT_S)


@given(
    st.integers(-1, 10**9),
    st.integers(-1, 10**9),
    st.integers(-1, 10**9),
    st.floats(0, 1e7),
    st.floats(0, 10),
    st.integers(0, 10**6),
)
def test_more_progress_never_makes_a_learner_less_caught_up(
    dirty, match, flushed, rate, timeout_s, more
):
    if is_caught_up(dirty, match, flushed, rate, timeout_s):
        assert is_caught_up(dirty, match + more, flushed + more, rate, timeout_s)
        assert is_caught_up(dirty - more, match, flushed, rate, timeout_s)


# --- the rate estimator -------------------------------------------------------------------


def test_no_rate_until_two_samples():
    rate = ReplicationRate()
    assert rate.offsets_per_s == 0.0
    assert rate.observe(1.0, 100).offsets_per_s == 0.0


def test_rate_over_the_window():
    rate = ReplicationRate(window_s=2.0)
    for second in range(10):
        rate = rate.observe(float(second), 500 * second)
    assert rate.offsets_per_s == pytest.approx(500.0)
    assert rate.samples[0].time_s == 7.0  # only the last two seconds are kept


def test_rate_follows_a_change_of_speed_within_the_window():
    rate = ReplicationRate(window_s=1.0)
    for tenth in range(20):  # 1000 offsets/s for two seconds
        rate = rate.observe(tenth / 10, 100 * tenth)
    for tenth in range(20, 40):  # then stalled
        rate = rate.observe(tenth / 10, 1900)
    assert rate.offsets_per_s == 0.0


def test_sparse_samples_still_give_a_rate():
    rate = ReplicationRate(window_s=1.0).observe(0.0, 0).observe(5.0, 1000)
    assert rate.offsets_per_s == pytest.approx(200.0)


def test_a_truncated_follower_restarts_the_measurement():
    rate = ReplicationRate().observe(0.0, 0).observe(1.0, 1000)
    rewound = rate.observe(1.5, 400)
    assert rewound.offsets_per_s == 0.0
    assert rewound.observe(2.0, 600).offsets_per_s == pytest.approx(400.0)


def test_time_never_goes_backwards():
    with pytest.raises(ValueError, match="time went backwards"):
        ReplicationRate().observe(2.0, 0).observe(1.0, 0)


def test_samples_are_bounded():
    rate = ReplicationRate(window_s=1e9)
    for second in range(3 * RATE_SAMPLES_MAX):
        rate = rate.observe(float(second), second)
    assert len(rate.samples) == RATE_SAMPLES_MAX
    assert rate.offsets_per_s == pytest.approx(1.0)


def test_observing_leaves_the_estimator_unchanged():
    rate = ReplicationRate().observe(0.0, 0)
    rate.observe(1.0, 10)
    assert len(rate.samples) == 1


@given(st.lists(st.tuples(st.floats(0, 5), st.integers(0, 10**6)), min_size=1, max_size=50))
def test_rate_is_never_negative_and_samples_stay_ordered(steps):
    rate, time_s, offset = ReplicationRate(), 0.0, 0
    for dt_s, delta in steps:
        time_s, offset = time_s + dt_s, offset + delta
        rate = rate.observe(time_s, offset)
        assert rate.offsets_per_s >= 0.0
        assert list(rate.samples) == sorted(rate.samples, key=lambda s: s.time_s)
        assert rate.samples[-1].time_s == time_s
