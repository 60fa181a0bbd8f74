"""The idempotent producer table: retries found, windows out of order, truncation."""

from __future__ import annotations

import pytest

from quorumlog.log.batch import parse_header
from quorumlog.log.records import make_data_batch
from quorumlog.raft.producers import (
    APPENDS_PER_PRODUCER_MAX,
    PRODUCER_IDLE_S,
    ProducerTable,
    StaleSequenceError,
)


def header(producer_id: int, seq: int, base_offset: int, records: int = 1):
    batch = make_data_batch(
        [(None, b"v", 0, None)] * records, producer_id=producer_id, producer_seq=seq
    )
    from quorumlog.log.batch import with_offset_and_term

    return parse_header(with_offset_and_term(batch, base_offset, 1))


def test_a_retry_finds_the_original_offsets():
    table = ProducerTable()
    table.note_batch(header(7, 0, 10, records=3), 0.0)
    found = table.find(7, 0)
    assert (found.first_offset, found.last_offset) == (10, 12)
    assert table.find(7, 1) is None
    assert table.find(8, 0) is None


def test_sequences_may_arrive_out_of_order_within_the_window():
    table = ProducerTable()
    for offset, seq in enumerate([3, 1, 2, 0]):
        table.note_batch(header(1, seq, offset), 0.0)
    assert [table.find(1, s).first_offset for s in range(4)] == [3, 1, 2, 0]


def test_sequences_older_than_memory_are_refused():
    table = ProducerTable()
    for seq in range(APPENDS_PER_PRODUCER_MAX + 5):
        table.note_batch(header(1, seq, seq), 0.0)
    with pytest.raises(StaleSequenceError):
        table.find(1, 2)
    assert table.find(1, APPENDS_PER_PRODUCER_MAX + 4).first_offset == APPENDS_PER_PRODUCER_MAX + 4


def test_truncation_forgets_what_it_removed():
    table = ProducerTable()
    for seq in range(5):
        table.note_batch(header(1, seq, seq * 10), 0.0)
    table.truncate(20)
    assert table.find(1, 1).first_offset == 10
    assert table.find(1, 2) is None and table.find(1, 4) is None
    table.note_batch(header(1, 2, 20), 0.0)
    assert table.find(1, 2).first_offset == 20


def test_batches_without_a_producer_are_ignored():
    table = ProducerTable()
    batch = make_data_batch([(None, b"v", 0, None)])
    table.note_batch(parse_header(batch), 0.0)
    assert table.find(-1, -1) is None


def test_committed_appends_leave_the_order_and_retries_still_find_them():
    """The order exists for truncations, which never reach a committed offset: it holds
    only the uncommitted tail (it kept every append, up to a million per replica, issue
    51), while the windows still answer retries of committed appends."""
    table = ProducerTable()
    for seq in range(100):
        table.note_batch(header(1, seq, seq * 10), 0.0)
    table.forget_committed(949)
    assert len(table._order) == 5
    assert table.find(1, 0).first_offset == 0, "a retry of a committed append"
    table.truncate(970)
    assert table.find(1, 96).first_offset == 960 and table.find(1, 97) is None


def test_a_producer_idle_for_a_day_is_forgotten():
    """Kafka's producer.id.expiration.ms: a restarted client takes a new id, so ids no
    longer used would otherwise stay for as long as the node runs."""
    table = ProducerTable()
    table.note_batch(header(1, 0, 0), 0.0)
    table.note_batch(header(2, 0, 1), 10.0)
    table.note_batch(header(1, 1, 2), 20.0)  # 1 appended again: 2 is now the idlest
    table.expire_idle(10.0 + PRODUCER_IDLE_S - 1)
    assert len(table) == 2
    table.expire_idle(10.0 + PRODUCER_IDLE_S)
    assert len(table) == 1 and table.find(2, 0) is None
    assert table.find(1, 0).first_offset == 0
    table.expire_idle(20.0 + PRODUCER_IDLE_S)
    assert len(table) == 0
    table.truncate(0)  # the order still names the forgotten ones' appends
    assert table.uncommitted == 0
