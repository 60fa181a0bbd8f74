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
        batch = make_data_batch([(None, b"r", 0, None)] * per_batch)
        out.append(with_offset_and_term(batch, offset, 1))
        offset += per_batch
    return b"".join(out)


def test_a_read_stops_decoding_once_it_has_what_was_asked(monkeypatch):
    decoded = []
    real = protocol.offset_records
    monkeypatch.setattr(
        protocol, "offset_records", lambda b, h: decoded.append(h.base_offset) or real(b, h)
    )
    reply = ReadReply(_batches(100, 10), 999, 0)
    records, _ = protocol.records_from(reply, 25, 20)
    assert [r.offset for r in records] == list(range(25, 45))
    assert decoded == [20, 30, 40], "the batch before the offset and those after are skipped"


def test_a_read_leaves_what_it_did_not_return_for_the_next_one():
    """`AsyncClient.read` answers a call that reads on from what the last reply held beyond
    what it returned (`decode_batches`: whole batches decoded, and the batches after them):
    the same records, each batch decoded once, one request a MiB."""
    data = _batches(30, 10)
    records, next_offset, rest = protocol.decode_batches(data, 0, 25, "t", 0)
    assert [r.offset for r in records] == list(range(30)), "the third batch whole"
    assert next_offset == 30 and len(rest) == len(_batches(27, 10))
    read, pending = records[:25], records[25:]
    while pending or rest:
        if len(pending) < 25 and rest:
            more, _, rest = protocol.decode_batches(rest, read[-1].offset + 1, 25, "t", 0)
            pending += more
        read, pending = read + pending[:25], pending[25:]
    assert [r.offset for r in read] == list(range(300)), "each record once, in order"
    assert {(r.topic, r.partition) for r in read} == {("t", 0)}
    assert not protocol.decode_batches(data, 0, 10_000, "t", 0)[2], "nothing left unread"


def test_the_batches_after_the_last_one_needed_are_not_checked():
    data = bytearray(_batches(3, 10))
    data[-1] ^= 0xFF  # the last batch's payload damaged
    records, _, rest = protocol.decode_batches(bytes(data), 0, 15, "t", 0)
    assert len(records) == 20 and rest  # the reader who reads on meets the damage then
