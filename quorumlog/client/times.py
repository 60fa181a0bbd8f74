"""Times as people write them (the command line's `consume --from-time` and `group
reset-offsets --to-time`, the console's forms): an ISO 8601 instant with its zone, or a
span back from now."""

from __future__ import annotations

import datetime
import re
import time

_AGO = re.compile(r"-(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


def parse_time_ms(text: str, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch of `2026-11-28T09:00:00Z` (or `+01:00`), or of `-10m`
    (also s, h, d) before `now_ms` (default: the clock now); ValueError otherwise."""
    ago = _AGO.fullmatch(text.strip())
    if ago is not None:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0, now_ms - int(ago[1]) * _UNIT_S[ago[2]] * 1000)  # before 1970: all
    try:
        instant = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: give ISO 8601 with its zone (2026-11-28T09:00:00Z) "
            "or a span back from now (-30s, -10m, -2h, -1d)"
        ) from None
    if instant.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone: end it with Z or an offset such as +01:00")
    ms = (instant - _EPOCH) // _MS  # exact, where a float's seconds may round down
    if ms < 0:
        raise ValueError(f"{text!r} is before 1970-01-01T00:00:00Z: no record is that old")
    return ms
