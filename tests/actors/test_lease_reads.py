"""Queue mode's read-ahead: the data batches after a group's next fresh offset, taken by
leases from memory; control batches between are skipped, what lies behind is dropped."""

from __future__ import annotations

from quorumlog.actors.coordinator.queue_reads import ReadAhead
from quorumlog.log.batch import with_offset_and_term
from tests.log.helpers import batch_of


def batch_at(base: int, count: int) -> bytes:
    return bytes(with_offset_and_term(batch_of(*[b"v"] * count), base, 1))


def test_leases_take_records_in_order_skipping_control_batches_and_dropping_the_past():
    ahead = ReadAhead(("t", 0))
    ahead.read_under_lock(0, {0: batch_at(0, 10), 12: batch_at(12, 8)}, 20)  # 10, 11: control
    assert ahead.covers(0) and ahead.covers(19) and not ahead.covers(20)
    blobs, offsets = ahead.take(0, 5, 100)
    assert offsets == [0, 1, 2, 3, 4] and list(blobs) == [0]
    blobs, offsets = ahead.take(5, 10, 100)
    assert offsets == [5, 6, 7, 8, 9, 12, 13, 14, 15, 16] and list(blobs) == [0, 12]
    blobs, offsets = ahead.take(17, 100, 19)
    assert offsets == [17, 18] and list(blobs) == [12], "nothing at or past the window's bound"
    assert ahead.bytes == len(batch_at(12, 8)), "the batch wholly behind is dropped"


def test_a_read_that_continues_extends_and_one_elsewhere_starts_again():
    ahead = ReadAhead(("t", 0))
    ahead.read_under_lock(0, {0: batch_at(0, 10)}, 10)
    ahead.read_under_lock(10, {10: batch_at(10, 10)}, 20)
    assert ahead.take(0, 100, 100)[1] == list(range(20))
    ahead.read_under_lock(50, {50: batch_at(50, 5)}, 55)
    assert not ahead.covers(10) and ahead.take(50, 100, 100)[1] == list(range(50, 55))
