"""Message <-> frame bytes: a 4-byte big-endian length, then the msgpack body.

The body is the array `[type_tag, correlation_id, *fields]`. Decoding checks the tag, the
field count and every field's type strictly, and raises ProtocolError for anything wrong;
`bool` is never accepted for an int (msgpack keeps them apart, Python does not).

The hot path is AppendEntries carrying megabytes of batches: a connection writes the
caller's batches object as it is, between the packed fields before and after it
(`encode_frame_parts`), and decoding copies them once (msgpack makes the `bytes` object).
No per-record work happens here.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

import msgpack

from quorumlog.log.records import packb
from quorumlog.transport.errors import ProtocolError
from quorumlog.transport.messages import MESSAGE_TYPES, Message
from quorumlog.transport.messages import REPLY_TYPES as MESSAGE_REPLY_TYPES

LENGTH_PREFIX = struct.Struct(">I")
FRAME_BYTES_MAX = 16 * 1024 * 1024
# Correlation ids are 0 (one-way) or a request number that never wraps on one connection.
CORRELATION_ID_MAX = 2**63 - 1
_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1
# A bytes field at least this long is written as it is, between the packed fields around
# it, rather than copied through msgpack's buffer (measured: the copy costs more from here).
_SPLICE_BYTES_MIN = 16 * 1024

_FIXARRAY = [bytes([0x90 | length]) for length in range(16)]  # msgpack's one-byte array header


class Frame(NamedTuple):
    """A decoded frame (a tuple: one is made per message received)."""

    correlation_id: int  # 0 for a one-way message
    message: Message


# --- field checks, derived once from the dataclass annotations ---------------------------


def _check_int(value: object) -> int:
    if type(value) is not int or not _INT_MIN <= value <= _INT_MAX:
        raise ProtocolError(f"expected a 64-bit int, got {_describe(value)}")
    return value


def _check_bool(value: object) -> bool:
    if type(value) is not bool:
        raise ProtocolError(f"expected a bool, got {_describe(value)}")
    return value


def _check_bytes(value: object) -> bytes:
    if type(value) is not bytes:
        raise ProtocolError(f"expected bytes, got {_describe(value)}")
    return value


def _check_str(value: object) -> str:
    if type(value) is not str:
        raise ProtocolError(f"expected a str, got {_describe(value)}")
    return value


def _check_dict(value: object) -> dict[str, Any]:
    # Nested values are whatever msgpack decoded; only the top level has a fixed shape.
    if type(value) is not dict or not all(type(key) is str for key in value):
        raise ProtocolError(f"expected a dict with str keys, got {_describe(value)}")
    return value


def _enum_check(cls: type[enum.IntEnum]) -> Callable[[object], enum.IntEnum]:
    members = {member.value: member for member in cls}

    def check(value: object) -> enum.IntEnum:
        member = members.get(value) if type(value) is int else None
        if member is None:
            raise ProtocolError(f"expected a {cls.__name__}, got {_describe(value)}")
        return member

    return check


def _optional_check(check: Callable[[object], Any]) -> Callable[[object], Any]:
    def check_optional(value: object) -> Any:
        return None if value is None else check(value)

    return check_optional


_SIMPLE_CHECKS: dict[object, Callable[[object], Any]] = {
    int: _check_int,
    bool: _check_bool,
    bytes: _check_bytes,
    str: _check_str,
    dict: _check_dict,
}


def _check_for(hint: object) -> Callable[[object], Any]:
    if isinstance(hint, types.UnionType):
        inner = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        assert len(inner) == 1, f"unsupported union {hint}"
        return _optional_check(_check_for(inner[0]))
    if isinstance(hint, type) and issubclass(hint, enum.IntEnum):
        return _enum_check(hint)
    check = _SIMPLE_CHECKS.get(typing.get_origin(hint) or hint)
    assert check is not None, f"no wire form for {hint}"
    return check


def _describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _compile_decoder(cls: type, names: list[str], hints: dict[str, Any]) -> Callable[[list], Any]:
    """A decoder for one message type that checks every field in one expression.

    The hot messages arrive hundreds of thousands of times a second, and a function call per
    field costs more than msgpack's own work. It returns None when anything is off; the
    field-by-field checks then say exactly what. Types with dict fields (not hot) get a
    decoder that always defers to them.
    """
    namespace: dict[str, Any] = {"cls": cls, "INT_MIN": _INT_MIN, "INT_MAX": _INT_MAX}
    lookups, conditions = [], []
    for name in names:
        hint = hints[name]
        optional = isinstance(hint, types.UnionType)
        if optional:
            (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if hint is int:
            condition = f"(type({name}) is int and INT_MIN <= {name} <= INT_MAX)"
        elif hint in (bool, bytes, str):
            condition = f"type({name}) is {hint.__name__}"
        elif isinstance(hint, type) and issubclass(hint, enum.IntEnum) and not optional:
            namespace[f"{name}_members"] = {member.value: member for member in hint}
            lookups.append(f"{name} = {name}_members.get({name}) if type({name}) is int else None")
            condition = f"{name} is not None"
        else:
            return lambda items: None
        conditions.append(f"({name} is None or {condition})" if optional else condition)
    source = "\n".join(
        [
            "def decode(items):",
            f"    _tag, _correlation_id, {''.join(name + ', ' for name in names)}= items",
            *(f"    {lookup}" for lookup in lookups),
            f"    if {' and '.join(conditions) or 'True'}:",
            f"        return cls({', '.join(f'{name}={name}' for name in names)})",
            "    return None",
        ]
    )
    exec(source, namespace)
    return namespace["decode"]


@dataclass(frozen=True, slots=True)
class _Spec:
    cls: type
    tag: int
    length: int  # of the body array
    get_fields: Callable[[Any], tuple[Any, ...]]
    decode_fast: Callable[[list], Any]  # the message, or None if any field is wrong
    checks: tuple[Callable[[object], Any], ...]  # per field: the value, or ProtocolError
    splice_index: int | None  # the bytes field worth framing around (the first), if any
    names: tuple[str, ...]  # of the fields, in wire order


def _spec(cls: type) -> _Spec:
    hints = typing.get_type_hints(cls)
    names = [field.name for field in dataclasses.fields(cls)]
    bytes_fields = [i for i, name in enumerate(names) if hints[name] is bytes]
    return _Spec(
        cls=cls,
        tag=cls.TAG,
        length=2 + len(names),
        get_fields=_fields_getter(names),
        decode_fast=_compile_decoder(cls, names, hints),
        checks=tuple(_check_for(hints[name]) for name in names),
        splice_index=bytes_fields[0] if bytes_fields else None,
        names=tuple(names),
    )


def _fields_getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) > 1:
        return attrgetter(*names)  # C speed; returns a tuple only for several names
    if names:
        get_one = attrgetter(names[0])
        return lambda message: (get_one(message),)
    return lambda message: ()


# --- the registry -------------------------------------------------------------------------

_SPECS_BY_TYPE: dict[type, _Spec] = {}
_SPECS_BY_TAG: dict[int, _Spec] = {}
# Types whose frames with a correlation id answer a request (connection.py, memory.py).
REPLY_TYPES: set[type] = set()


def register(*types: type, replies: Iterable[type] = ()) -> None:
    """Make `types` travel: each a frozen dataclass with a `TAG` no other type has. The
    transport registers its own messages; the node adds the other layers' (Raft's). Calling
    it again with the same types changes nothing."""
    for cls in types:
        if cls in _SPECS_BY_TYPE:
            continue
        spec = _spec(cls)
        assert spec.length < len(_FIXARRAY), f"{cls.__name__}: body too long"
        known = _SPECS_BY_TAG.get(spec.tag)
        assert known is None or known.cls is cls, f"tag {spec.tag} is {known.cls.__name__}'s"
        _SPECS_BY_TYPE[cls] = _SPECS_BY_TAG[spec.tag] = spec
    REPLY_TYPES.update(replies)


def registered_types() -> tuple[type, ...]:
    return tuple(_SPECS_BY_TYPE)


register(*MESSAGE_TYPES, replies=MESSAGE_REPLY_TYPES)


# --- encoding -----------------------------------------------------------------------------


def encode_frame(
    correlation_id: int, message: Message, frame_bytes_max: int = FRAME_BYTES_MAX
) -> bytes:
    """The whole frame (length prefix and body) for `message`, as one byte string.

    Raises ValueError if the body would exceed `frame_bytes_max`: the remote would refuse it,
    so the caller must split or refuse what it sends.
    """
    parts = encode_frame_parts(correlation_id, message, frame_bytes_max)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_frame_parts(
    correlation_id: int, message: Message, frame_bytes_max: int = FRAME_BYTES_MAX
) -> tuple[bytes, ...]:
    """The frame as pieces to write one after the other, the large batches never copied.

    Small frames are one piece. A frame with a large bytes field is three: everything up to
    its msgpack bin header, the field itself (the caller's object), and the fields after it.
    Copying a megabyte into a fresh buffer costs more than the write it feeds (page faults),
    so the writer sends the caller's bytes as they are.
    """
    spec = _SPECS_BY_TYPE[type(message)]
    fields = spec.get_fields(message)
    index = spec.splice_index
    if index is None or len(fields[index]) < _SPLICE_BYTES_MIN:
        body = packb([spec.tag, correlation_id, *fields])
        parts: tuple[bytes, ...] = (LENGTH_PREFIX.pack(len(body)) + body,)
        body_bytes = len(body)
    else:
        parts = _spliced_parts(spec, correlation_id, fields, index)
        body_bytes = sum(map(len, parts)) - LENGTH_PREFIX.size
    if body_bytes > frame_bytes_max:
        raise ValueError(
            f"{type(message).__name__} frame of {body_bytes} bytes "
            f"exceeds frame_bytes_max {frame_bytes_max}"
        )
    return parts


def _spliced_parts(
    spec: _Spec, correlation_id: int, fields: tuple, index: int
) -> tuple[bytes, bytes, bytes]:
    # msgpack packs the fields before and after the big one as arrays of their own; every
    # body has fewer than 16 items, so an array header is one byte and is swapped for the
    # whole body's.
    before = packb([spec.tag, correlation_id, *fields[:index]])
    after = packb(fields[index + 1 :])
    big = fields[index]
    head = _FIXARRAY[spec.length] + before[1:] + _bin_header(len(big))
    tail = after[1:]
    return LENGTH_PREFIX.pack(len(head) + len(big) + len(tail)) + head, big, tail


def _bin_header(length: int) -> bytes:
    # msgpack's Packer has no pack_bin_header; these are the bin 8/16/32 formats.
    if length <= 0xFF:
        return b"\xc4" + length.to_bytes(1, "big")
    if length <= 0xFFFF:
        return b"\xc5" + length.to_bytes(2, "big")
    return b"\xc6" + length.to_bytes(4, "big")


# --- decoding -----------------------------------------------------------------------------


def decode_body(body: bytes | bytearray | memoryview) -> Frame:
    """Decode one frame body (without its length prefix); any fault raises ProtocolError."""
    try:
        items = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # unpackb raises many types for hostile input; all mean the same
        raise ProtocolError(f"body is not msgpack: {type(exc).__name__}: {exc}") from None
    if type(items) is not list or len(items) < 2:
        raise ProtocolError(
            f"body is not a [type_tag, correlation_id, ...] array: {_describe(items)}"
        )
    tag, correlation_id = items[0], items[1]
    spec = _SPECS_BY_TAG.get(tag) if type(tag) is int else None
    if spec is None:
        raise ProtocolError(f"unknown message type tag {_describe(tag)}")
    if type(correlation_id) is not int or not 0 <= correlation_id <= CORRELATION_ID_MAX:
        raise ProtocolError(f"bad correlation id {_describe(correlation_id)}")
    if len(items) != spec.length:
        raise ProtocolError(
            f"{spec.cls.__name__} needs {spec.length - 2} fields, got {len(items) - 2}"
        )
    message = spec.decode_fast(items)
    if message is None:
        try:
            values = [check(value) for check, value in zip(spec.checks, items[2:], strict=True)]
        except ProtocolError as exc:
            raise ProtocolError(f"{spec.cls.__name__}: {exc}") from None
        message = spec.cls(**dict(zip(spec.names, values, strict=True)))
    return Frame(correlation_id, message)
