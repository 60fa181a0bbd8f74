"""What an append is given is checked at the call, before anything is sent: a str stored
as a record's value once poisoned its partition for every reader."""

from __future__ import annotations

import pytest

from quorumlog.actors.replica.append_check import checked_batches
from quorumlog.client.protocol import Record, prepare, record_list
from quorumlog.log.batch import build_batch
from quorumlog.log.records import encode_records, make_data_batch
from quorumlog.transport.messages import Acks, AppendRequest, ErrorReply


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: prepare([Record("x")]), "value must be bytes or None, not str"),
        (lambda: prepare([Record(b"x", key="k")]), "key must be bytes or None, not str"),
        (lambda: prepare([Record(b"x", headers=[("h", "v")])]), "headers are (str, bytes) pairs"),
        (lambda: prepare([Record(b"x", headers=[(b"h", b"v")])]), "headers are (str, bytes) pairs"),
        (lambda: prepare([Record(b"x", headers=[("h",)])]), "headers are (str, bytes) pairs"),
        (lambda: record_list(None), "not NoneType"),
        (lambda: record_list(b"abc"), "not bytes"),
        (lambda: record_list("abc"), "not str"),
        (lambda: record_list(Record(b"x")), "not Record"),
        (lambda: prepare(["x"]), "a record is bytes or a Record, not str"),
        (lambda: prepare([b"ok", 7]), "not int"),
    ],
)
def test_anything_but_bytes_is_a_type_error_naming_it(make, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_what_is_allowed_goes_through():
    assert record_list((b"a", Record(b"b"))) == [b"a", Record(b"b")]
    assert record_list(iter([b"a"])) == [b"a"]
    (tombstone,) = prepare([Record(None, key=b"k", headers=[("h", b"v")])])
    assert tombstone.fields[:2] == (b"k", None)  # no value: not the same as an empty one
    (plain,) = prepare([bytearray(b"z")])
    assert plain.fields[1] == b"z"


def _old_client_batch(records: list[tuple], compress: bool = False) -> bytes:
    """A batch as a client from before 0.4 (or another one) made it: nothing checked."""
    payload, compression = encode_records(records, compress)
    return build_batch(payload, record_count=len(records), compression=compression)


def _leader_checks(batch: bytes):
    return checked_batches(AppendRequest(batch, Acks.QUORUM, -1, -1), 1 << 20, None)


@pytest.mark.parametrize(
    ("records", "compress", "why"),
    [
        ([(None, b"ok", 0, None), (None, "x", 0, None)], False, "record 1: its value is str"),
        ([("k", b"v", 0, None)], False, "record 0: its key is str"),
        ([(None, b"v", 0, [["h", "v"]])], False, "record 0: a header is not a (str, bytes)"),
        ([(None, "x" * 4096, 0, None)] * 8, True, "record 0: its value is str"),
        ([(None, 7, 0, None)], False, "record 0: its value is int"),
    ],
)
def test_the_leader_refuses_a_field_that_is_not_bytes_from_an_unchecked_client(
    records, compress, why
):
    refused = _leader_checks(_old_client_batch(records, compress))
    assert isinstance(refused, ErrorReply) and why in refused.message, refused


def test_batches_of_bytes_pass_whoever_made_them():
    records = [(b"k", b"v", 0, [["h", b"v"]]), (None, b"w", 0, None)]
    assert not isinstance(_leader_checks(_old_client_batch(records)), ErrorReply)
    assert not isinstance(_leader_checks(make_data_batch(records)), ErrorReply)
