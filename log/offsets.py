"""Record offsets: what readers see, where the log has positions of its own.

A log holds Raft's own batches (a new leader's barrier, configuration changes) between the
records clients appended, and each takes a position, so positions have holes for readers.
A record's offset counts only the data records before it: the Nth record appended to a
partition has offset N-1 whatever leaders and configurations came between (Redpanda's
offset translator has the same shape). Only positions cross Raft; offsets are translated
where they leave or enter a node.

`OffsetTranslator` keeps the positions of the log's control batches (small: one per term
and per configuration change) and, for the log's first position, how many records came
before it. The controls are rebuilt from the segments when a log opens (their index files
list them); the first position's count, which nothing left in the log may tell once
retention, a trim or a reset dropped what came before, is kept in a small file of its own
(`RecordStart`), written before the drop it describes.
"""

from __future__ import annotations

import bisect

import msgpack

from quorumlog.log.batch import HEADER_BYTES, BatchType, parse_header, placed_header
from quorumlog.log.files import (
    CorruptionError,
    FileSystem,
    framed,
    read_whole_file,
    unframed,
    write_file_atomically,
)

RECORD_START_FILE = "record-start"
_MAGIC = b"QLR1"


class OffsetTranslator:
    """Positions of one log to record offsets and back. Control batches are noted as they
    are appended; `records_before(p)` is the record offset a data record at position `p`
    has (the number of data records before it), `position_of(r)` the position of record `r`
    (past the log's end, where it would go if the next batches are data)."""

    def __init__(self, start: int = 0, start_records: int = 0):
        self.start = start  # the log's first position
        self.start_records = start_records  # the records before it
        self._positions: list[int] = []  # each control batch's first position, ascending
        self._widths: list[int] = []  # and how many positions it takes
        self._records: list[int] = []  # the records before each control batch

    def __len__(self) -> int:
        return len(self._positions)

    def records_before(self, position: int) -> int:
        """The data records at positions before `position` (which is not inside a control
        batch); before the log's start, counted as if no control batch were there."""
        i = bisect.bisect_left(self._positions, position)
        if i == 0:
            return self.start_records + position - self.start
        # Every position from the end of control i - 1 up to `position` holds a record.
        end = self._positions[i - 1] + self._widths[i - 1]
        return self._records[i - 1] + position - end

    def position_of(self, record: int) -> int:
        """The position of the data record `record`: after every control batch that comes
        before it."""
        i = bisect.bisect_right(self._records, record)
        if i == 0:
            return self.start + record - self.start_records
        return self._positions[i - 1] + self._widths[i - 1] + record - self._records[i - 1]

    def controls(self) -> list[tuple[int, int]]:
        """(position, width) of every control batch, in order."""
        return list(zip(self._positions, self._widths, strict=True))

    def to_wire(self) -> dict:
        """Its state in plain msgpack types (a coordinator counting a partition's old
        positions again: actors/coordinator/coordinator.py)."""
        return {
            "start": self.start,
            "start_records": self.start_records,
            "controls": [list(c) for c in self.controls()],
        }

    @classmethod
    def from_wire(cls, wire: dict) -> OffsetTranslator:
        """As `to_wire` made it; ValueError, TypeError or KeyError if malformed."""
        translator = cls(int(wire["start"]), int(wire["start_records"]))
        for position, width in wire["controls"]:
            translator.add_control(int(position), int(width))
        return translator

    def add_control(self, position: int, width: int) -> None:
        """A control batch appended at `position` (after everything noted)."""
        if self._positions and position < self._positions[-1] + self._widths[-1]:
            raise ValueError(f"a control batch at {position} is not after the last one")
        self._records.append(self.records_before(position))
        self._positions.append(position)
        self._widths.append(width)

    def truncate(self, position: int) -> None:
        """The log lost everything from `position` on."""
        keep = bisect.bisect_left(self._positions, position)
        del self._positions[keep:], self._widths[keep:], self._records[keep:]

    def trim(self, start: int) -> None:
        """The log starts at `start` now (a batch boundary after the old start)."""
        self.start_records = self.records_before(start)
        self.start = start
        drop = bisect.bisect_left(self._positions, start)
        del self._positions[:drop], self._widths[:drop], self._records[:drop]

    def prepend(self, start: int, controls: list[tuple[int, int]]) -> None:
        """Positions [start, self.start) were copied in before the log (log/backfill.py),
        with these control batches among them."""
        width = sum(w for _, w in controls)
        self.start_records -= self.start - start - width
        self.start = start
        old = self.controls()
        self._positions, self._widths, self._records = [], [], []
        for position, w in [*controls, *old]:
            self.add_control(position, w)

    def reset(self, start: int, start_records: int) -> None:
        """The log was dropped whole and goes on at `start`, with `start_records` before."""
        self.start, self.start_records = start, start_records
        self._positions, self._widths, self._records = [], [], []


def read_record_start(fs: FileSystem, path: str) -> tuple[int, int] | None:
    """(position, records before it) as last written, or None when there is no file (a log
    that never dropped its beginning, or one written before record offsets)."""
    if not fs.exists(path):
        return None
    body = unframed(_MAGIC, read_whole_file(fs, path))
    if body is None:
        raise CorruptionError(path, 0, "record start file is damaged")
    position, records = msgpack.unpackb(body)
    return position, records


def write_record_start(fs: FileSystem, path: str, position: int, records: int) -> None:
    """Durably, before the log's beginning is dropped (storage rule 7)."""
    body = msgpack.packb([position, records])
    write_file_atomically(fs, path, framed(_MAGIC, body))


def as_records(data: bytes | memoryview, first_record: int) -> bytes:
    """Whole batches read from a log as readers get them: the data batches only, each
    based at its record offset (the first one at `first_record`), terms kept."""
    view = memoryview(data)
    parts: list[bytes | memoryview] = []
    record = first_record
    pos = 0
    while pos < len(view):
        header = parse_header(view, pos)
        end = pos + header.total_bytes
        if header.batch_type is BatchType.DATA:
            if header.base_offset == record:
                parts.append(view[pos:end])
            else:
                parts.append(placed_header(view[pos:end], record, header.term))
                parts.append(view[pos + HEADER_BYTES : end])
            record += header.record_count
        pos = end
    return b"".join(parts)
