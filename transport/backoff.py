"""Jittered exponential backoff for redialling, from a generator the caller owns."""

from __future__ import annotations

import random
from dataclasses import dataclass

# Past this many doublings the delay is long capped anyway; it keeps the power finite.
_DOUBLINGS_MAX = 64


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 0.05
    max_s: float = 2.0
    multiplier: float = 2.0
    # Fraction of each delay drawn at random, so nodes that lost the same peer at the same
    # moment do not all redial it in step.
    jitter: float = 0.5

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        """The wait before retry number `attempt` (0 for the first)."""
        ceiling_s = min(
            self.max_s, self.initial_s * self.multiplier ** min(attempt, _DOUBLINGS_MAX)
        )
        return ceiling_s * (1.0 - self.jitter * rng.random())


DEFAULT_BACKOFF = Backoff()
