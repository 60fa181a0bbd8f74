"""What the fault harness saw, and the checker of RELIABILITY's invariants over it.

Every partition is its own Raft group (its own log, offsets, leaders and terms), so the
history is kept per partition: every append a producer attempted (value, acks, outcome,
offset), every record a reader saw (per node, in order), every leader the watcher saw per
term, and the faults with their times. `check` compares it with each partition's logs,
read from its replicas after everything healed. A violation is a broken promise, named with
its partition; `leader`/`none` losses are figures, not failures.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from quorumlog.client.protocol import DEFAULT_TOPIC

UNAVAILABLE_GAP_S = 1.0  # quorum acks further apart than this count as unavailability
ACKS_LEVELS = ("quorum", "leader", "none")

Log = list[tuple[int, bytes]]  # (offset, value) of every record, in order


class Part(NamedTuple):
    """A partition of a topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"


DEFAULT_PART = Part(DEFAULT_TOPIC, 0)


@dataclass
class Append:
    value: bytes
    acks: str
    start: float
    end: float
    outcome: str  # "ok" or "unknown" (an error or timeout: it may or may not be in the log)
    offset: int | None = None
    topic: str = DEFAULT_TOPIC
    partition: int = 0

    @property
    def part(self) -> Part:
        return Part(self.topic, self.partition)


@dataclass
class History:
    appends: list[Append] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    seen: dict[Part, dict[int, bytes]] = field(default_factory=dict)  # offset -> value
    reader_offsets: dict[tuple[int, Part], list[int]] = field(default_factory=dict)
    leaders: dict[Part, dict[int, set[int]]] = field(default_factory=dict)  # term -> nodes
    violations: list[str] = field(default_factory=list)

    def event(self, at: float, what: str, /, **details) -> None:
        self.events.append({"at": round(at, 3), "event": what, **details})

    def saw_leader(self, part: Part, term: int, node_id: int) -> None:
        nodes = self.leaders.setdefault(part, {}).setdefault(term, set())
        nodes.add(node_id)
        if len(nodes) == 2:
            self.violations.append(f"I6 {part}: term {term} had two leaders: {sorted(nodes)}")

    def saw_records(self, reader: int, part: Part, records: Log) -> None:
        """A reader's poll: offsets must rise, and no offset may change its value."""
        offsets = self.reader_offsets.setdefault((reader, part), [])
        seen = self.seen.setdefault(part, {})
        for offset, value in records:
            if offsets and offset <= offsets[-1]:
                self.violations.append(
                    f"I4 {part}: reader of node {reader} went back from {offsets[-1]} to {offset}"
                )
            offsets.append(offset)
            known = seen.setdefault(offset, value)
            if known != value:
                self.violations.append(
                    f"I3/I5 {part}: offset {offset} was read as {known!r} and later as {value!r}"
                )

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            for event in self.events:
                f.write(json.dumps(event) + "\n")
            for a in self.appends:
                row = {**asdict(a), "value": a.value.decode(), "event": "append"}
                f.write(json.dumps(row) + "\n")


def check(history: History, logs: dict[Part, dict[int, Log]]) -> dict:
    """Figures and violations of a run, from its history and the final log of every replica
    of each partition in `logs`: totals over those partitions, and under "partitions" each
    one's own figures."""
    violations = list(history.violations)
    appends: dict[Part, list[Append]] = defaultdict(list)
    for a in history.appends:
        appends[a.part].append(a)
    per_part: dict[str, dict[str, int]] = {}
    for part, replicas in sorted(logs.items()):
        figures, found = _check_partition(history, part, replicas, appends[part])
        per_part[str(part)] = figures
        violations += found
    totals: Counter[str] = Counter()
    for figures in per_part.values():
        totals.update(figures)
    return {**totals, "partitions": per_part, "violations": violations}


def _check_partition(
    history: History, part: Part, logs: dict[int, Log], appends: list[Append]
) -> tuple[dict[str, int], list[str]]:
    violations: list[str] = []

    def broken(rule: str, what: str) -> None:
        violations.append(f"{rule} {part}: {what}")

    reference_node, reference = max(logs.items(), key=lambda item: len(item[1]))
    for node_id, log in logs.items():
        if log != reference:
            broken(
                "I2",
                f"node {node_id}'s committed log differs from node {reference_node}'s "
                f"({len(log)} vs {len(reference)} records; first difference at "
                f"{_first_difference(log, reference)})",
            )
    offset_of: dict[bytes, int] = {}
    for offset, value in reference:  # values are unique, so a repeat is a duplicate
        if value in offset_of:
            broken("I3", f"{value!r} at offsets {offset_of[value]} and {offset}")
        offset_of[value] = offset
    value_at = dict(reference)

    figures: dict[str, int] = {}
    for acks in ACKS_LEVELS:
        mine = [a for a in appends if a.acks == acks]
        acked = [a for a in mine if a.outcome == "ok"]
        lost = [a for a in acked if a.value not in offset_of]
        figures[f"{acks}_attempted"] = len(mine)
        figures[f"{acks}_acked"] = len(acked)
        figures[f"{acks}_lost"] = len(lost)
        for a in acked:
            if a.offset is not None and offset_of.get(a.value, a.offset) != a.offset:
                broken("I1", f"{a.value!r} acknowledged at {a.offset} sits at {offset_of[a.value]}")
        if acks == "quorum":
            for a in lost[:10]:
                broken("I1", f"{a.value!r} acknowledged at {a.offset} is lost")
    figures["unknown_outcomes"] = sum(a.outcome == "unknown" for a in appends)
    figures["unknown_present"] = sum(
        a.outcome == "unknown" and a.value in offset_of for a in appends
    )

    for offset, value in history.seen.get(part, {}).items():
        if value_at.get(offset) != value:
            broken(
                "I5", f"a reader saw {value!r} at {offset}; the log holds {value_at.get(offset)!r}"
            )
            break
    data_offsets = [offset for offset, _ in reference]
    read = {reader: o for (reader, p), o in history.reader_offsets.items() if p == part}
    for reader, offsets in sorted(read.items()):  # a reader skips nothing
        if offsets and not _covers(offsets, data_offsets):
            broken("I4", f"the reader of node {reader} skipped records")
    figures["records_in_log"] = len(reference)
    figures["records_read"] = sum(len(o) for o in read.values())
    return figures, violations


def unavailable_s(history: History, start: float, end: float) -> float:
    """Time without a quorum acknowledgement in any partition, counting gaps over
    UNAVAILABLE_GAP_S."""
    times = sorted(a.end for a in history.appends if a.acks == "quorum" and a.outcome == "ok")
    edges = [start, *times, end]
    return sum(b - a for a, b in itertools.pairwise(edges) if b - a > UNAVAILABLE_GAP_S)


def throughput_ratio(history: History, start: float, end: float) -> float | None:
    """Quorum acknowledgements in [start, end) over those in as long a time before."""
    times = [a.end for a in history.appends if a.acks == "quorum" and a.outcome == "ok"]
    during = sum(start <= t < end for t in times)
    before = sum(2 * start - end <= t < start for t in times)
    return round(during / before, 2) if before else None


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
