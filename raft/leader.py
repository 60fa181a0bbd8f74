"""What a leader keeps for its term, from its election to its step-down (etcd keeps the
same beside its tracker: heartbeat elapsed, pendingConfIndex, leadTransferee). It exists
only while this node leads: a follower has none, so none of it can outlive a term."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class Leadership:
    since_s: float  # when it won: the check-quorum rule gives it an election timeout
    heartbeat_deadline_s: float = math.inf
    # Entries up to here have a caller waiting for their commit (quorum appends,
    # configurations, the term's barrier); `follower_flush = "quorum"` asks followers to
    # fsync them before replying.
    awaited_offset: int = -1
    # Leadership transfer in progress: (target, give up at); appends wait meanwhile.
    transfer: tuple[int, float] | None = None
