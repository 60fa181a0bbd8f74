"""Times as people write them (quorumlog/client/times.py): `consume --from-time`, `group
reset-offsets --to-time` and the console take them."""

from __future__ import annotations

import pytest

from quorumlog.client.times import parse_time_ms

NOW_MS = 1_795_856_400_123  # 2026-11-28T09:00:00.123Z


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-28T09:00:00Z", 1_795_856_400_000),
        ("2026-11-28T10:00:00+01:00", 1_795_856_400_000),
        ("2026-11-28T09:00:00.123Z", 1_795_856_400_123),  # exact, no float rounding
        ("2026-11-28T08:59:59.999-00:00", 1_795_856_399_999),
        ("-30s", NOW_MS - 30_000),
        ("-10m", NOW_MS - 600_000),
        ("-2h", NOW_MS - 7_200_000),
        ("-1d", NOW_MS - 86_400_000),
    ],
)
def test_instants_and_spans_back_from_now(text, expected):
    assert parse_time_ms(text, now_ms=NOW_MS) == expected


@pytest.mark.parametrize(
    "text", ["", "yesterday", "2026-11-28T09:00:00", "2026-11-28", "10m", "-10x", "+10m", "-m"]
)
def test_anything_else_is_refused_with_a_reason(text):
    with pytest.raises(ValueError, match=r"time|zone"):
        parse_time_ms(text, now_ms=NOW_MS)
