"""The CLI's record formats without a cluster: templates, JSON lines both ways, -H."""

from __future__ import annotations

import json

import pytest

from quorumlog.cli.record_format import (
    FormatError,
    compile_template,
    json_line,
    json_records,
    parse_header,
    record_from_json,
    records_writer,
)
from quorumlog.client.protocol import Record

READ = Record(
    b"v\xff",
    key=b"k",
    timestamp_ms=1700000000123,
    headers=[("a", b"1"), ("b", b"x=y")],
    offset=41,
    topic="events",
    partition=3,
)


@pytest.mark.parametrize(
    ("template", "printed"),
    [
        ("%t %p %o %k %v %h %T", b"events 3 41 k v\xff a=1,b=x=y 1700000000123\n"),
        (r"%k=%v\n", b"k=v\xff\n"),
        (r"%o\t%%\\", b"41\t%\\\n"),
        ("{topic}/{partition}@{offset} {timestamp}", b"events/3@41 1700000000123\n"),
        ("{{{key}}} {", b"{k} {\n"),
        ("", b"\n"),
    ],
)
def test_templates_print_kcat_fields_and_end_each_record_with_one_newline(template, printed):
    assert compile_template(template)(READ) == printed


def test_absent_fields_print_nothing_or_minus_one():
    bare = Record(b"v", offset=0, topic="t", partition=0)
    assert compile_template("[%k][%h][%T]")(bare) == b"[][][-1]\n"


@pytest.mark.parametrize("template", ["%x", "%", "{vaule}", "\\q", "ends in \\"])
def test_unknown_fields_and_escapes_are_refused(template):
    with pytest.raises(FormatError):
        compile_template(template)


def test_json_lines_round_trip_bytes_and_keep_text_readable():
    line = json_line(READ)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    obj = json.loads(line)
    assert obj == {
        "topic": "events",
        "partition": 3,
        "offset": 41,
        "timestamp": 1700000000123,
        "key": "k",
        "value": {"base64": "dv8="},
        "headers": [{"key": "a", "value": "1"}, {"key": "b", "value": "x=y"}],
    }
    back = record_from_json(line)
    assert back.partition == 3
    assert (back.record.key, back.record.value, back.record.headers) == (
        READ.key,
        READ.value,
        READ.headers,
    )
    assert back.record.timestamp_ms == READ.timestamp_ms
    assert back.record.offset is None and back.record.topic is None, "the log gives those"
    text = json_line(Record("é\n".encode(), offset=0, topic="t", partition=0))
    assert '"value": "é\\n"'.encode() in text and text.count(b"\n") == 1


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[1]",
        b'{"key": "k"}',
        b'{"value": 1}',
        b'{"value": "v", "partition": -1}',
        b'{"value": "v", "vaule": "v"}',
        b'{"value": {"base64": "!!"}}',
        b'{"value": "v", "headers": [{"key": "a"}]}',
        b'{"value": "\\ud800"}',
    ],
)
def test_bad_json_input_is_refused(line):
    with pytest.raises(FormatError):
        record_from_json(line)


def test_json_chunks_skip_blank_lines_add_headers_and_name_the_bad_line():
    records, asked = json_records(
        [b'{"value": "a", "partition": 1}', b"", b'{"value": "b"}'], 0, [("h", b"v")]
    )
    assert [r.value for r in records] == [b"a", b"b"] and asked == [1, None]
    assert all(r.headers == [("h", b"v")] for r in records)
    with pytest.raises(FormatError, match="line 12:"):
        json_records([b'{"value": "a"}', b"{"], 10, [])


def test_headers_and_the_default_outputs():
    assert parse_header("trace=a=b") == ("trace", b"a=b")
    assert parse_header("empty=") == ("empty", b"")
    for bad in ("novalue", "=v"):
        with pytest.raises(FormatError):
            parse_header(bad)
    records = [Record(b"a", offset=5), Record(b"b", offset=6)]
    assert records_writer(None, False)(records) == b"a\nb\n"
    assert records_writer(None, True)(records) == b"5\ta\n6\tb\n"
