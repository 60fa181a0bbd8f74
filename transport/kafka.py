"""Kafka's wire protocol: frames, request headers, and the API versions this node speaks.

The message types are kio's, generated from Kafka's own JSON schemas; this module only
frames them. A request's header and its response's are the version's own: v1 and v0
before Kafka's flexible encoding, v2 and v1 (tagged fields) from it. An ApiVersions
request of a version not served is answered in v0 with the versions served (KIP-511).
Handlers build responses from plain dicts (`make`): one handler serves every version of an
API, and fields a version does not have are left out.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import DecodeError

FRAME_BYTES_MAX = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
SIZE = struct.Struct(">i")

API_VERSIONS = 18

# API key -> the versions served (docs/kafka.md says what each answers).
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (3, 8),  # Produce
    1: (4, 11),  # Fetch
    2: (1, 5),  # ListOffsets
    3: (0, 13),  # Metadata
    8: (2, 9),  # OffsetCommit (v9: the consumer protocol's members, by member epoch)
    9: (1, 7),  # OffsetFetch (v7: require_stable)
    10: (0, 2),  # FindCoordinator
    11: (0, 5),  # JoinGroup
    12: (0, 3),  # Heartbeat
    13: (0, 3),  # LeaveGroup
    14: (0, 3),  # SyncGroup
    15: (0, 4),  # DescribeGroups
    16: (0, 2),  # ListGroups
    17: (1, 1),  # SaslHandshake (v0's raw tokens are not served)
    18: (0, 4),  # ApiVersions
    19: (2, 4),  # CreateTopics
    20: (1, 3),  # DeleteTopics
    21: (0, 1),  # DeleteRecords
    22: (0, 4),  # InitProducerId
    23: (2, 3),  # OffsetForLeaderEpoch
    24: (0, 3),  # AddPartitionsToTxn (v4 on: between brokers, and transactions v2)
    25: (0, 3),  # AddOffsetsToTxn (v4: transactions v2)
    26: (0, 3),  # EndTxn (v5: transactions v2)
    28: (0, 3),  # TxnOffsetCommit (v4 on: transactions v2)
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs (v0 is gone from current clients and kio)
    33: (0, 1),  # AlterConfigs
    36: (0, 1),  # SaslAuthenticate
    37: (0, 1),  # CreatePartitions
    42: (0, 1),  # DeleteGroups
    44: (0, 0),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    60: (0, 2),  # DescribeCluster
    68: (0, 1),  # ConsumerGroupHeartbeat (KIP-848)
    69: (0, 1),  # ConsumerGroupDescribe
}


class FrameError(Exception):
    """Bytes that are not a Kafka request: the connection is closed (as Kafka does)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any  # a kio request entity; None when the API or version is not served


def parse_request(frame: bytes) -> Request:
    """A request from one frame (the bytes after the size); FrameError if it is not one."""
    try:
        header, size = entity_reader(RequestHeader)(frame, 0)
    except (DecodeError, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise FrameError(f"bad request header: {exc}") from None
    key, version = header.request_api_key, header.request_api_version
    low, high = SUPPORTED.get(key, (1, 0))
    if not low <= version <= high:
        return Request(key, version, header.correlation_id, header.client_id, None)
    try:
        schema = _request_type(key, version)
        if schema.__header_schema__ is not RequestHeader:  # v2: tagged fields follow
            _, size = entity_reader(schema.__header_schema__)(frame, 0)
        body, _ = entity_reader(schema)(frame, size)
    # KeyError: a tagged field kio does not know (flexible versions).
    except (DecodeError, ValueError, IndexError, UnicodeDecodeError, TypeError, KeyError) as exc:
        raise FrameError(f"bad request body (api {key} v{version}): {exc}") from None
    return Request(key, version, header.correlation_id, header.client_id, body)


def encode_response(request: Request, values: dict) -> bytes:
    """The size-prefixed response to `request`, built from `values` (see `make`)."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    response = _response_type(request.api_key, request.version)
    header = response.__header_schema__  # v1 (tagged fields) for flexible versions
    entity_writer(header)(out, make(header, {"correlation_id": request.correlation_id}))
    entity_writer(response)(out, make(response, values))
    data = out.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def unsupported_response(request: Request) -> bytes:
    """The answer to an API or version not served: Kafka's UNSUPPORTED_VERSION. ApiVersions
    answers in v0 with the versions served (KIP-511), so the client can retry."""
    if request.api_key == API_VERSIONS:
        v0 = dataclasses.replace(request, version=0)
        return encode_response(v0, api_versions(ErrorCode.unsupported_version))
    return error_response(request, ErrorCode.unsupported_version)


def error_response(request: Request, error: ErrorCode = ErrorCode.unknown_server_error) -> bytes:
    """A response of the request's type carrying only `error` (its top-level error code,
    where the type has one); for a type kio does not know, the correlation id and code."""
    try:
        return encode_response(request, {"error_code": error})
    except (UnknownAPIKey, UnknownEntity, TypeError):  # TypeError: a field with no zero
        body = SIZE.pack(request.correlation_id) + struct.pack(">h", error.value)
        return SIZE.pack(len(body)) + body


def api_versions(error: ErrorCode = ErrorCode.none) -> dict:
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(SUPPORTED.items())
        ],
    }


@cache
def _request_type(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)  # kio finds the module again each call


@cache
def _response_type(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


# --------------------------------------------------------------- building responses


def make(cls: type, values: dict) -> Any:
    """An instance of the kio entity `cls` from `values`: nested entities from dicts (or
    lists of dicts), plain ints as durations in milliseconds, and every field not given
    set to its default or its type's zero (0, "", None, empty)."""
    kwargs = {}
    for name, convert, zero in _plan(cls):
        if name in values:
            kwargs[name] = convert(values[name])
        elif isinstance(zero, _NoZero):
            raise TypeError(f"no zero value for {zero.hint!r}")
        elif zero is not _DEFAULTED:
            kwargs[name] = zero
    return cls(**kwargs)


_DEFAULTED = object()  # a field the entity itself fills when not given


@dataclasses.dataclass(frozen=True)
class _NoZero:
    """A field whose type has no zero (a nested entity): it must be given."""

    hint: Any


@cache
def _plan(cls: type) -> tuple[tuple[str, Callable[[Any], Any], Any], ...]:
    """Each field of `cls`: its name, what converts a value given for it, and the value
    it takes when none is (worked out once per entity: a producer's answers each made
    their entities from the type hints again, a tenth of the leader's time per record)."""
    hints = typing.get_type_hints(cls)
    plan = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        defaulted = not (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        if defaulted:
            zero = _DEFAULTED
        else:
            try:
                zero = _zero(hint)
            except TypeError:
                zero = _NoZero(hint)
        plan.append((field.name, _converter(hint), zero))
    return tuple(plan)


@cache
def _converter(hint: Any) -> Callable[[Any], Any]:
    """What makes a value given for a field of type `hint` into what kio writes (None
    stays None)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = _converter(next(a for a in typing.get_args(hint) if a is not type(None)))
        return lambda value: None if value is None else inner(value)
    if origin is tuple:
        element = _converter(typing.get_args(hint)[0])
        return lambda value: None if value is None else tuple(map(element, value))
    if dataclasses.is_dataclass(hint):
        return lambda value: make(hint, value) if isinstance(value, dict) else value
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return lambda value: (
            datetime.timedelta(milliseconds=value) if isinstance(value, int) else value
        )
    if hint is ErrorCode:
        return lambda value: ErrorCode(value) if isinstance(value, int) else value
    return _unchanged


def _unchanged(value: Any) -> Any:
    return value


def _zero(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return None
    if origin is tuple:
        return ()
    if hint is ErrorCode:
        return ErrorCode.none
    if isinstance(hint, type):
        if issubclass(hint, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(hint, bool):
            return False
        if issubclass(hint, int):
            return 0
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
    raise TypeError(f"no zero value for {hint!r}")
