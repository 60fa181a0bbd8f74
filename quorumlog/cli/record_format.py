"""Records as the CLI prints and reads them: kcat-like `--format` templates, one JSON object a
line, and `-H name=value` headers. Plain functions of records and text: no client, no I/O.

The JSON form is one object a line, the same for `consume --format json` and
`produce --format json` so that the one feeds the other:

    {"topic": "events", "partition": 3, "offset": 41, "timestamp": 1764320400000,
     "key": "alice", "value": "1", "headers": [{"key": "source", "value": "web"}]}

Bytes (a key, a value, a header's value) are a JSON string when they are valid UTF-8, else
`{"base64": "..."}`; an absent key or value is null.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from quorumlog.client.protocol import Record

# kcat's -f letters and their names in the {name} form.
FIELD_LETTERS = {
    "t": "topic",
    "p": "partition",
    "o": "offset",
    "k": "key",
    "v": "value",
    "h": "headers",
    "T": "timestamp",
}
FIELD_NAMES = frozenset(FIELD_LETTERS.values())
ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}
# What a template is cut into: %X, {name} (or {{ }}), \X, or a run of plain text.
_TOKEN = re.compile(r"%(.?)|\{\{|\}\}|\{([A-Za-z_]*)\}|\\(.?)|[^%{}\\]+|[{}]", re.DOTALL)
JSON_IN_KEYS = frozenset({"topic", "partition", "offset", "timestamp", "key", "value", "headers"})

Formatter = Callable[[Record], bytes]


class FormatError(ValueError):
    """A template or an input line that cannot be used; the message says what and where."""


def field_bytes(record: Record, name: str) -> bytes:
    """One field of a record as a template prints it: bytes as they are, numbers in decimal,
    headers as `name=value,name=value` (kcat's form); nothing for an absent key or value, -1
    for an absent timestamp (as kcat)."""
    match name:
        case "topic":
            return (record.topic or "").encode()
        case "partition":
            return b"%d" % (record.partition if record.partition is not None else -1)
        case "offset":
            return b"%d" % (record.offset if record.offset is not None else -1)
        case "key":
            return record.key or b""
        case "value":
            return record.value or b""
        case "headers":
            return b",".join(n.encode() + b"=" + v for n, v in record.headers or ())
        case "timestamp":
            return b"%d" % (record.timestamp_ms if record.timestamp_ms is not None else -1)
    raise AssertionError(f"unknown field {name}")


def compile_template(template: str) -> Formatter:
    """A kcat-like template (`%t %p %o %k %v %h %T`, `%%`, `\\n` `\\t` escapes) or a named one
    (`{topic} {partition} {offset} {key} {value} {headers} {timestamp}`, `{{` `}}` for braces)
    as a function of a record. Each record ends with a newline unless the template already
    does (so kcat's `'%k %v\\n'` prints the same lines as `'%k %v'`)."""
    parts: list[bytes | str] = []  # literal bytes, or a field's name
    for m in _TOKEN.finditer(template):
        letter, name, escape = m.group(1), m.group(2), m.group(3)
        text = m.group(0)
        if text.startswith("%"):
            if letter == "%":
                parts.append(b"%")
            elif letter in FIELD_LETTERS:
                parts.append(FIELD_LETTERS[letter])
            else:
                raise FormatError(
                    f"unknown field %{letter} in the format: use %t %p %o %k %v %h %T or %%"
                )
        elif text.startswith("\\"):
            if escape not in ESCAPES:
                raise FormatError(f"unknown escape \\{escape} in the format: use \\n \\t \\\\")
            parts.append(ESCAPES[escape])
        elif name is not None:
            if name not in FIELD_NAMES:
                known = " ".join(f"{{{n}}}" for n in FIELD_LETTERS.values())
                raise FormatError(f"unknown field {{{name}}} in the format: use {known}")
            parts.append(name)
        elif text in ("{{", "}}"):
            parts.append(text[0].encode())
        else:
            parts.append(os.fsencode(text))
    if not parts or parts[-1] != b"\n":
        parts.append(b"\n")
    joined = _joined_literals(parts)

    def formatted(record: Record) -> bytes:
        return b"".join(p if type(p) is bytes else field_bytes(record, p) for p in joined)

    return formatted


def _joined_literals(parts: list[bytes | str]) -> list[bytes | str]:
    out: list[bytes | str] = []
    for p in parts:
        if type(p) is bytes and out and type(out[-1]) is bytes:
            out[-1] += p
        else:
            out.append(p)
    return out


def encode_bytes(data: bytes | None) -> str | dict | None:
    """Bytes for JSON: text when valid UTF-8, else {"base64": ...}; None stays null."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def decode_bytes(value: object, what: str) -> bytes | None:
    """The inverse of `encode_bytes`; FormatError naming `what` for anything else."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise FormatError(
                f"{what}: a lone surrogate is no UTF-8 (base64 carries any bytes)"
            ) from None
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except binascii.Error:
            raise FormatError(f"{what}: not valid base64") from None
    raise FormatError(f'{what} is a string, {{"base64": "..."}} or null, not {value!r:.40}')


def json_line(record: Record) -> bytes:
    """One record as one line of JSON (see the module's docstring)."""
    obj = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "key": encode_bytes(record.key),
        "value": encode_bytes(record.value),
        "headers": [{"key": n, "value": encode_bytes(v)} for n, v in record.headers or ()],
    }
    return json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"


@dataclass(frozen=True, slots=True)
class InputRecord:
    """A record read from one JSON line, and the partition that line asked for (if any)."""

    record: Record
    partition: int | None


def record_from_json(line: bytes) -> InputRecord:
    """One line of `produce --format json`: the object `json_line` prints. `topic` and
    `offset` are ignored (the target is --topic; the log gives offsets); `timestamp` is kept
    as the record's time when given."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FormatError(f"a JSON object is expected, not {type(obj).__name__}")
    unknown = set(obj) - JSON_IN_KEYS
    if unknown:
        raise FormatError(
            f"unknown field {sorted(unknown)[0]!r}: known are {', '.join(sorted(JSON_IN_KEYS))}"
        )
    if "value" not in obj:
        raise FormatError('no "value" (null for a tombstone)')
    partition = _optional_int(obj, "partition")
    timestamp_ms = _optional_int(obj, "timestamp")
    headers = obj.get("headers") or []
    if not isinstance(headers, list):
        raise FormatError('"headers" is a list of {"key": NAME, "value": VALUE}')
    pairs = []
    for h in headers:
        if not isinstance(h, dict) or set(h) != {"key", "value"} or not isinstance(h["key"], str):
            raise FormatError(f'a header is {{"key": NAME, "value": VALUE}}, not {h!r:.40}')
        pairs.append((h["key"], decode_bytes(h["value"], f"header {h['key']!r}") or b""))
    record = Record(
        decode_bytes(obj["value"], '"value"'),
        key=decode_bytes(obj.get("key"), '"key"'),
        timestamp_ms=timestamp_ms,
        headers=pairs or None,
    )
    return InputRecord(record, partition)


def _optional_int(obj: dict, name: str) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FormatError(f'"{name}" is a whole number at or above 0, not {value!r:.40}')
    return value


def parse_header(text: str) -> tuple[str, bytes]:
    """`-H name=value` as a record header (the value may hold `=`; it may be empty)."""
    name, found, value = text.partition("=")
    if not found or not name:
        raise FormatError(f"a header is NAME=VALUE, not {text!r}")
    return name, os.fsencode(value)


def records_writer(output_format: str | None, with_offsets: bool) -> Callable[[list], bytes]:
    """What one read's records print as: a value a line (no format), "OFFSET<TAB>VALUE"
    (--with-offsets), JSON lines (`json`) or a template."""
    if output_format == "json":
        return lambda records: b"".join([json_line(r) for r in records])
    if output_format is not None:
        formatted = compile_template(output_format)
        return lambda records: b"".join([formatted(r) for r in records])
    if with_offsets:
        return lambda records: b"".join([b"%d\t%s\n" % (r.offset, r.value or b"") for r in records])
    return lambda records: b"\n".join([r.value or b"" for r in records]) + b"\n"


def line_record(line: bytes, separator: bytes | None, headers: list[tuple[str, bytes]]) -> Record:
    """A line of `produce` (KEY SEP VALUE with a separator that it holds), with `headers`."""
    extra = headers or None
    if separator is None:
        return Record(line, headers=extra)
    key, found, value = line.partition(separator)
    return Record(value, key=key, headers=extra) if found else Record(line, headers=extra)


def json_records(
    chunk: list[bytes], lines_before: int, headers: list[tuple[str, bytes]]
) -> tuple[list[Record], list[int | None]]:
    """The records of a chunk of JSON lines, each with `headers` added, and the partition
    each asked for. Blank lines are skipped; FormatError names the bad line's number."""
    records, asked = [], []
    for number, line in enumerate(chunk, start=lines_before + 1):
        if not line.strip():
            continue  # a blank line (a trailing one, say) is no record
        try:
            parsed = record_from_json(line)
        except FormatError as exc:
            raise FormatError(f"line {number}: {exc}") from None
        record = parsed.record
        if headers:
            record = dataclasses.replace(record, headers=[*(record.headers or ()), *headers])
        records.append(record)
        asked.append(parsed.partition)
    return records, asked
