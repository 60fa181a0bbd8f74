"""When a learner has caught up enough to become a voter.

Raft dissertation 4.2.1: a new server must not count toward majorities until it has caught
up, or the cluster can stall while it copies the log; "caught up" means the rest of the log
could be replicated to it within one election timeout, so that the cluster is unavailable
for at most about that long. Kudu promotes its PRE_FOLLOWER by the same rule (seed 000).
The leader measures rather than counts rounds: the recent rate at which the learner's match
offset advanced, and the lag that remains.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

RATE_WINDOW_S = 2.0  # long enough to smooth over a few heartbeats, short enough to follow load
RATE_SAMPLES_MAX = 64


def catch_up_time_s(
    leader_dirty_offset: int, match_offset: int, flushed_offset: int, offsets_per_s: float
) -> float:
    """How long replicating the learner's remaining lag would take at `offsets_per_s`.

    The lag is measured from min(match, flushed): once a voter, that is what the learner
    contributes to a commit (seed 004). Infinite when it lags and nothing is moving.
    """
    lag_offsets = leader_dirty_offset - min(match_offset, flushed_offset)
    if lag_offsets <= 0:
        return 0.0
    if offsets_per_s <= 0:
        return math.inf
    return lag_offsets / offsets_per_s


def is_caught_up(
    leader_dirty_offset: int,
    match_offset: int,
    flushed_offset: int,
    offsets_per_s: float,
    election_timeout_s: float,
) -> bool:
    """Whether the learner's lag could be replicated within one election timeout.

    Pass the minimum of the randomized election timeout: the conservative choice.
    """
    remaining_s = catch_up_time_s(leader_dirty_offset, match_offset, flushed_offset, offsets_per_s)
    return remaining_s <= election_timeout_s


@dataclass(frozen=True, slots=True)
class ProgressSample:
    time_s: float
    match_offset: int


@dataclass(frozen=True, slots=True)
class ReplicationRate:
    """The rate at which a learner's match offset advanced over the last `window_s`.

    A value: `observe` returns the estimator with one more sample. Time is passed in by the
    caller (trio's clock in the actors), never read here.
    """

    window_s: float = RATE_WINDOW_S
    samples: tuple[ProgressSample, ...] = ()

    def observe(self, time_s: float, match_offset: int) -> ReplicationRate:
        kept = self.samples
        if kept and time_s < kept[-1].time_s:
            raise ValueError(f"time went backwards: {kept[-1].time_s} -> {time_s}")
        if kept and match_offset < kept[-1].match_offset:
            # The follower's log was cut back to where it matches the leader's: the progress
            # measured before says nothing about the progress to come.
            kept = ()
        # Keep the samples in the window, but at least the previous one so that sparse
        # samples still give a rate, and never more than the named maximum.
        in_window = [s for s in kept if s.time_s >= time_s - self.window_s]
        kept = kept[-max(len(in_window), 1) :] if kept else ()
        kept = (*kept, ProgressSample(time_s, match_offset))[-RATE_SAMPLES_MAX:]
        return dataclasses.replace(self, samples=kept)

    @property
    def offsets_per_s(self) -> float:
        """Offsets per second between the oldest and newest sample; 0.0 until measurable."""
        if len(self.samples) < 2:
            return 0.0
        first, last = self.samples[0], self.samples[-1]
        elapsed_s = last.time_s - first.time_s
        if elapsed_s <= 0:
            return 0.0
        return (last.match_offset - first.match_offset) / elapsed_s
