"""What the fault harness saw, and the checker of RELIABILITY's invariants over it.

The history holds every append a producer attempted (value, acks, outcome, offset), every
record a reader saw (per node, in order), every leader the watcher saw per term, and the
faults with their times. `check` compares it with the nodes' logs read after everything
healed. A violation is a broken promise; `leader`/`none` losses are figures, not failures.
"""

from __future__ import annotations

import bisect
import itertools
import json
from dataclasses import asdict, dataclass, field

UNAVAILABLE_GAP_S = 1.0  # quorum acks further apart than this count as unavailability


@dataclass
class Append:
    value: bytes
    acks: str
    start: float
    end: float
    outcome: str  # "ok" or "unknown" (an error or timeout: it may or may not be in the log)
    offset: int | None = None


@dataclass
class History:
    appends: list[Append] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    seen: dict[int, bytes] = field(default_factory=dict)  # offset -> value, any reader
    reader_offsets: dict[int, list[int]] = field(default_factory=dict)
    leaders: dict[int, set[int]] = field(default_factory=dict)  # term -> nodes seen leading
    violations: list[str] = field(default_factory=list)

    def event(self, at: float, what: str, /, **details) -> None:
        self.events.append({"at": round(at, 3), "event": what, **details})

    def saw_leader(self, term: int, node_id: int) -> None:
        nodes = self.leaders.setdefault(term, set())
        nodes.add(node_id)
        if len(nodes) == 2:
            self.violations.append(f"I6: term {term} had two leaders: {sorted(nodes)}")

    def saw_records(self, reader: int, records: list[tuple[int, bytes]]) -> None:
        """A reader's poll: offsets must rise, and no offset may change its value."""
        offsets = self.reader_offsets.setdefault(reader, [])
        for offset, value in records:
            if offsets and offset <= offsets[-1]:
                self.violations.append(
                    f"I4: reader of node {reader} went back from {offsets[-1]} to {offset}"
                )
            offsets.append(offset)
            known = self.seen.setdefault(offset, value)
            if known != value:
                self.violations.append(
                    f"I3/I5: offset {offset} was read as {known!r} and later as {value!r}"
                )

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            for event in self.events:
                f.write(json.dumps(event) + "\n")
            for a in self.appends:
                row = {**asdict(a), "value": a.value.decode(), "event": "append"}
                f.write(json.dumps(row) + "\n")


def check(history: History, logs: dict[int, list[tuple[int, bytes]]]) -> dict:
    """Figures and violations of a run, from its history and every member's final log."""
    violations = list(history.violations)
    reference_node, reference = max(logs.items(), key=lambda item: len(item[1]))
    for node_id, log in logs.items():  # I2
        if log != reference:
            violations.append(
                f"I2: node {node_id}'s committed log differs from node {reference_node}'s "
                f"({len(log)} vs {len(reference)} records; first difference at "
                f"{_first_difference(log, reference)})"
            )
    offset_of: dict[bytes, int] = {}
    for offset, value in reference:  # I3: values are unique, so a repeat is a duplicate
        if value in offset_of:
            violations.append(f"I3: {value!r} at offsets {offset_of[value]} and {offset}")
        offset_of[value] = offset
    value_at = dict(reference)

    figures: dict[str, int] = {}
    for acks in ("quorum", "leader", "none"):
        mine = [a for a in history.appends if a.acks == acks]
        acked = [a for a in mine if a.outcome == "ok"]
        lost = [a for a in acked if a.value not in offset_of]
        moved = [
            a
            for a in acked
            if a.offset is not None and a.value in offset_of and offset_of[a.value] != a.offset
        ]
        figures[f"{acks}_attempted"] = len(mine)
        figures[f"{acks}_acked"] = len(acked)
        figures[f"{acks}_lost"] = len(lost)
        for a in moved:
            violations.append(
                f"I1: {a.value!r} acknowledged at {a.offset} sits at {offset_of[a.value]}"
            )
        if acks == "quorum":
            for a in lost[:10]:
                violations.append(f"I1: {a.value!r} acknowledged at {a.offset} is lost")
    figures["unknown_outcomes"] = sum(a.outcome == "unknown" for a in history.appends)
    figures["unknown_present"] = sum(
        a.outcome == "unknown" and a.value in offset_of for a in history.appends
    )

    for offset, value in history.seen.items():  # I5
        if value_at.get(offset) != value:
            violations.append(
                f"I5: a reader saw {value!r} at {offset}; the log holds {value_at.get(offset)!r}"
            )
            break
    data_offsets = [offset for offset, _ in reference]
    for reader, offsets in history.reader_offsets.items():  # I4: a reader skips nothing
        if offsets and not _covers(offsets, data_offsets):
            violations.append(f"I4: the reader of node {reader} skipped records")
    figures["records_in_log"] = len(reference)
    figures["records_read"] = sum(len(o) for o in history.reader_offsets.values())
    return {**figures, "violations": violations}


def unavailable_s(history: History, start: float, end: float) -> float:
    """Time without a quorum acknowledgement, counting gaps over UNAVAILABLE_GAP_S."""
    times = sorted(a.end for a in history.appends if a.acks == "quorum" and a.outcome == "ok")
    edges = [start, *times, end]
    return sum(b - a for a, b in itertools.pairwise(edges) if b - a > UNAVAILABLE_GAP_S)


def _covers(offsets: list[int], data_offsets: list[int]) -> bool:
    """A reader's offsets hold every data offset between its first and its last."""
    lo = bisect.bisect_left(data_offsets, offsets[0])
    hi = bisect.bisect_right(data_offsets, offsets[-1])
    return data_offsets[lo:hi] == sorted(set(offsets))


def _first_difference(a: list, b: list) -> int | str:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return x[0]
    return "the end of the shorter"
