"""What an append is given is checked at the call, before anything is sent: a str stored
as a record's value once poisoned its partition for every reader."""

from __future__ import annotations

import pytest

from quorumlog.protocol import Record, prepare, record_list


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
    assert tombstone.fields[:2] == (b"k", b"")  # the log holds no null values
    (plain,) = prepare([bytearray(b"z")])
    assert plain.fields[1] == b"z"
