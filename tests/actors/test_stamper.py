"""Which time a leader stamps: its clock, waited out when just behind the log's last stamp,
that stamp plus one when far behind; never a time below it."""

from __future__ import annotations

from quorumlog.actors.replica.stamper import Stamper

MAX = 1_800_000_000_000


def stamper_at(clock_ms: int) -> Stamper:
    return Stamper(lambda: clock_ms, wait_max_ms=1_000, group_id=1)


def test_a_clock_past_the_last_stamp_is_taken_as_it_is():
    assert stamper_at(MAX + 5).stamp_or_wait(MAX) == (MAX + 5, 0.0)
    assert stamper_at(MAX).stamp_or_wait(MAX) == (MAX, 0.0)


def test_a_clock_just_behind_waits_the_gap_out():
    assert stamper_at(MAX - 250).stamp_or_wait(MAX) == (None, 0.25)


def test_a_clock_far_behind_stamps_the_last_stamp_plus_one():
    stamper = stamper_at(MAX - 5_000)
    assert stamper.stamp_or_wait(MAX) == (MAX + 1, 0.0)
    assert stamper.stamp_or_wait(MAX + 1) == (MAX + 2, 0.0)
