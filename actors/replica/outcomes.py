"""Why each applied command did nothing, kept for the call that proposed it.

A state machine applies every committed command; the call that proposed one waits for it
to be applied and then takes its outcome. A caller cancelled meanwhile, or a command that
no call waits for (a snapshot, another node's proposal), leaves its outcome behind: the
oldest go beyond KEPT, far more than can be in flight at once (issue 51: they were kept
for good)."""

from __future__ import annotations

KEPT = 4096


class Outcomes:
    def __init__(self) -> None:
        self._by_offset: dict[int, str | None] = {}  # in applying order

    def put(self, offset: int, why: str | None) -> None:
        self._by_offset[offset] = why
        if len(self._by_offset) > KEPT:
            del self._by_offset[next(iter(self._by_offset))]

    def take(self, offset: int) -> str | None:
        return self._by_offset.pop(offset, None)

    def __len__(self) -> int:
        return len(self._by_offset)
