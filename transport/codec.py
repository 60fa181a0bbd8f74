"""Message <-> frame bytes: a 4-byte big-endian length, then the msgpack body.

The body is the array `[type_tag, correlation_id, *fields]`. Decoding checks the tag, the
field count and every field's type strictly, and raises ProtocolError for anything wrong;
`bool` is never accepted for an int (msgpack keeps them apart, Python does not).

The hot path is AppendEntries carrying megabytes of batches: those bytes are copied once
when a frame is built (beside the small fields, not through msgpack's buffer) and once when
it is decoded (msgpack makes the `bytes` object); no per-record work happens here.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgpack

from transport.errors import ProtocolError
from transport.messages import MESSAGE_TYPES, Message

LENGTH_PREFIX = struct.Struct(">I")
FRAME_BYTES_MAX = 16 * 1024 * 1024
# Correlation ids are 0 (one-way) or a request number that never wraps on one connection.
CORRELATION_ID_MAX = 2**63 - 1
_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1
# A bytes field at least this long is framed around rather than packed through msgpack,
# which would copy it once more.
_SPLICE_BYTES_MIN = 64 * 1024

_packb = msgpack.Packer(use_bin_type=True).pack


@dataclass(frozen=True, slots=True)
class Frame:
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


@dataclass(frozen=True, slots=True)
class _Spec:
    cls: type
    tag: int
    length: int  # of the body array
    get_fields: Callable[[Any], tuple[Any, ...]]
    checks: tuple[Callable[[object], Any], ...]
    splice_index: int | None  # the one bytes field worth framing around, if any


def _spec(cls: type) -> _Spec:
    hints = typing.get_type_hints(cls)
    names = [field.name for field in dataclasses.fields(cls)]
    bytes_fields = [i for i, name in enumerate(names) if hints[name] is bytes]
    return _Spec(
        cls=cls,
        tag=cls.TAG,
        length=2 + len(names),
        get_fields=_fields_getter(names),
        checks=tuple(_check_for(hints[name]) for name in names),
        splice_index=bytes_fields[0] if len(bytes_fields) == 1 else None,
    )


def _fields_getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) > 1:
        return attrgetter(*names)  # C speed; returns a tuple only for several names
    if names:
        get_one = attrgetter(names[0])
        return lambda message: (get_one(message),)
    return lambda message: ()


_SPECS_BY_TYPE: dict[type, _Spec] = {cls: _spec(cls) for cls in MESSAGE_TYPES}
_SPECS_BY_TAG: dict[int, _Spec] = {spec.tag: spec for spec in _SPECS_BY_TYPE.values()}
assert len(_SPECS_BY_TAG) == len(_SPECS_BY_TYPE), "duplicate message tag"


# --- encoding -----------------------------------------------------------------------------


def encode_frame(
    correlation_id: int, message: Message, frame_bytes_max: int = FRAME_BYTES_MAX
) -> bytes:
    """The whole frame (length prefix and body) for `message`.

    Raises ValueError if the body would exceed `frame_bytes_max`: the remote would refuse it,
    so the caller must split or refuse what it sends.
    """
    spec = _SPECS_BY_TYPE[type(message)]
    fields = spec.get_fields(message)
    index = spec.splice_index
    if index is None or len(fields[index]) < _SPLICE_BYTES_MIN:
        body = _packb([spec.tag, correlation_id, *fields])
        frame = LENGTH_PREFIX.pack(len(body)) + body
    else:
        frame = _encode_spliced(spec, correlation_id, fields, index)
    if len(frame) - LENGTH_PREFIX.size > frame_bytes_max:
        raise ValueError(
            f"{type(message).__name__} frame of {len(frame) - LENGTH_PREFIX.size} bytes "
            f"exceeds frame_bytes_max {frame_bytes_max}"
        )
    return frame


def _encode_spliced(spec: _Spec, correlation_id: int, fields: tuple, index: int) -> bytes:
    # msgpack would copy the big field into its buffer and the prefix join would copy it
    # again; packing the small fields around a bin header copies it once, in the join.
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    packer.pack_array_header(spec.length)
    packer.pack(spec.tag)
    packer.pack(correlation_id)
    for value in fields[:index]:
        packer.pack(value)
    big = fields[index]
    head = packer.bytes() + _bin_header(len(big))
    packer.reset()
    for value in fields[index + 1 :]:
        packer.pack(value)
    tail = packer.bytes()
    length = LENGTH_PREFIX.pack(len(head) + len(big) + len(tail))
    return b"".join((length, head, big, tail))


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
    try:
        values = [check(value) for check, value in zip(spec.checks, items[2:], strict=True)]
    except ProtocolError as exc:
        raise ProtocolError(f"{spec.cls.__name__}: {exc}") from None
    return Frame(correlation_id, spec.cls(*values))
