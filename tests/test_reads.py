"""A read decodes what it returns and no more: `consume` asked for a thousand small
records at a time, and each read decoded a whole megabyte of batches again (printing the
last 500,000 of 500,000 lines took 97 s; a read loop, 10 s)."""

from __future__ import annotations

from quorumlog.client import protocol
from quorumlog.log.batch import with_offset_and_term
from quorumlog.log.records import make_data_batch
from quorumlog.transport.messages import ReadReply


def _batches(count: int, per_batch: int) -> bytes:
    out, offset = [], 0
    for _ in range(count):
        batch = make_data_batch([(None, b"r", 0, None)] * per_batch, timestamp_ms=0)
        out.append(with_offset_and_term(batch, offset, 1))
        offset += per_batch
    return b"".join(out)


def test_a_read_stops_decoding_once_it_has_what_was_asked(monkeypatch):
    decoded = []
    real = protocol.batch_records
    monkeypatch.setattr(
        protocol, "batch_records", lambda b, h: decoded.append(h.base_offset) or real(b, h)
    )
    reply = ReadReply(_batches(100, 10), 999, 0)
    records, _ = protocol.records_from(reply, 25, 20)
    assert [r.offset for r in records] == list(range(25, 45))
    assert decoded == [20, 30, 40], "the batch before the offset and those after are skipped"
