"""Which time a leader stamps on a log-append topic's batches (seed 002, KUDU-430).

Timestamps in offset order must never go back, across any number of leader changes, even
when the nodes' clocks disagree. A leader therefore never stamps below the largest stamp in
its log (`RaftCore.max_stamp_ms`: it holds every committed batch, so that stamp is at least
any committed one). Its own clock is behind that stamp only just after it took over from a
leader whose clock ran ahead: then, if the gap is at most `timestamp_wait_max_ms`, the round
of appends waits it out (Spanner's commit-wait) so that the stamp is a true reading of this
clock; a larger gap is not waited out (appends would stall for as long) but stamped as the
largest stamp plus one, with a warning, until the clock catches up.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

logger = structlog.get_logger("quorumlog.stamper")


class Stamper:
    def __init__(self, wall_clock_ms: Callable[[], int], wait_max_ms: int, group_id: int):
        self._wall_clock_ms = wall_clock_ms
        self._wait_max_ms = wait_max_ms
        self._group_id = group_id
        self._warned_below = -1  # the largest stamp last warned about: one warning per gap

    def stamp_or_wait(self, max_stamp_ms: int) -> tuple[int | None, float]:
        """(the stamp for this round, 0), or (None, seconds to hold the round)."""
        now_ms = self._wall_clock_ms()
        behind_ms = max_stamp_ms - now_ms
        if behind_ms <= 0:
            return now_ms, 0.0
        if behind_ms <= self._wait_max_ms:
            return None, behind_ms / 1000
        if self._warned_below < max_stamp_ms - self._wait_max_ms:
            self._warned_below = max_stamp_ms
            logger.warning(
                "clock_behind_log_stamps",
                group=self._group_id,
                behind_ms=behind_ms,
                stamping=max_stamp_ms + 1,
            )
        return max_stamp_ms + 1, 0.0
