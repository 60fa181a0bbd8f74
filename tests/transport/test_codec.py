import dataclasses

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import quorumlog.raft.messages as raft_messages
import quorumlog.transport.messages as messages
from quorumlog.log.batch import build_batch, split_batches, with_offset_and_term
from quorumlog.raft.messages import RAFT_MESSAGES, AppendEntries, Heartbeat, VoteRequest
from quorumlog.transport.codec import (
    _SPECS_BY_TAG,
    LENGTH_PREFIX,
    decode_body,
    encode_frame,
    register,
    registered_types,
)
from quorumlog.transport.errors import ProtocolError
from quorumlog.transport.messages import (
    MESSAGE_TYPES,
    Acks,
    AdminReply,
    AdminRequest,
    AppendRequest,
    ErrorCode,
    ErrorReply,
    GroupRequest,
    OffsetMapReply,
    ReadReply,
    StatusReply,
    TxnRequest,
)
from tests.transport.strategies import correlation_ids, message_of, wire_values


def body_of(frame: bytes) -> bytes:
    (length,) = LENGTH_PREFIX.unpack_from(frame)
    assert length == len(frame) - LENGTH_PREFIX.size
    return frame[LENGTH_PREFIX.size :]


def declared_in(module) -> set[type]:
    return {
        cls
        for cls in vars(module).values()
        if isinstance(cls, type) and dataclasses.is_dataclass(cls)
    }


def test_every_message_class_is_registered_with_a_unique_tag():
    assert declared_in(messages) == set(MESSAGE_TYPES)
    assert declared_in(raft_messages) == set(RAFT_MESSAGES)
    every = registered_types()
    assert set(every) == set(MESSAGE_TYPES) | set(RAFT_MESSAGES)
    assert len({cls.TAG for cls in every}) == len(every)
    for cls in every:
        assert cls.__dataclass_params__.frozen and hasattr(cls, "__slots__")


def test_a_tag_taken_is_refused():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Impostor:
        TAG = Heartbeat.TAG
        group: int

    with pytest.raises(AssertionError, match="Heartbeat"):
        register(Impostor)
    assert decode_body(msgpack.packb(GOOD)).message == Heartbeat(
        group=1, term=2, leader_id=3, leader_commit=4
    )


@pytest.mark.parametrize("cls", registered_types(), ids=lambda cls: cls.__name__)
@given(data=st.data(), correlation_id=correlation_ids)
def test_round_trip(cls, data, correlation_id):
    message = data.draw(message_of(cls))
    frame = decode_body(body_of(encode_frame(correlation_id, message)))
    assert frame.correlation_id == correlation_id
    assert frame.message == message
    assert type(frame.message) is cls
    for field in dataclasses.fields(cls):  # enums come back as enums, bools as bools
        assert type(getattr(frame.message, field.name)) is type(getattr(message, field.name))


def realistic_batches(count: int, payload_bytes: int) -> bytes:
    batches = [
        with_offset_and_term(
            build_batch(bytes([i % 251]) * payload_bytes, record_count=10), i * 10, 3
        )
        for i in range(count)
    ]
    return b"".join(batches)


@pytest.mark.parametrize("payload_bytes", [100, 40_000, 300_000])
def test_batches_travel_as_the_same_bytes(payload_bytes):
    batches = realistic_batches(4, payload_bytes)
    message = AppendEntries(
        group=1,
        term=7,
        leader_id=2,
        prev_offset=39,
        prev_term=3,
        leader_commit=20,
        batches=batches,
        flush=False,
    )
    frame = encode_frame(5, message)
    # The spliced fast path and msgpack's own encoding must be the same bytes on the wire.
    generic = msgpack.packb([AppendEntries.TAG, 5, 1, 7, 2, 39, 3, 20, batches, False, b"", 0])
    assert body_of(frame) == generic
    decoded = decode_body(body_of(frame)).message
    assert decoded.batches == batches
    assert [header.base_offset for header, _ in split_batches(decoded.batches)] == [0, 10, 20, 30]


def test_large_bytes_in_client_messages_round_trip():
    batches = realistic_batches(2, 70_000)
    for message in (AppendRequest(batches, Acks.QUORUM, 9, 4), ReadReply(batches, 10, 0)):
        assert decode_body(body_of(encode_frame(1, message))).message == message


def test_oversized_frame_is_refused_by_the_sender():
    message = AppendEntries(
        group=1,
        term=1,
        leader_id=1,
        prev_offset=-1,
        prev_term=-1,
        leader_commit=-1,
        batches=b"x" * 2000,
        flush=True,
    )
    with pytest.raises(ValueError, match="frame_bytes_max"):
        encode_frame(1, message, frame_bytes_max=1000)


GOOD = [Heartbeat.TAG, 0, 1, 2, 3, 4, 0]


@pytest.mark.parametrize(
    "body, reason",
    [
        ([Heartbeat.TAG, 0, 1, 2, 3, 4], "fields"),
        ([Heartbeat.TAG, 0, 1, 2, 3, 4, 5, 6], "fields"),
        ([Heartbeat.TAG, 0, True, 2, 3, 4, 0], "int"),
        ([Heartbeat.TAG, 0, 1.0, 2, 3, 4, 0], "int"),
        ([Heartbeat.TAG, 0, "1", 2, 3, 4, 0], "int"),
        ([Heartbeat.TAG, 0, 2**63, 2, 3, 4, 0], "int"),
        ([Heartbeat.TAG, 0, None, 2, 3, 4, 0], "int"),
        ([Heartbeat.TAG, -1, 1, 2, 3, 4, 0], "correlation"),
        ([Heartbeat.TAG, "x", 1, 2, 3, 4, 0], "correlation"),
        ([99, 0, 1], "unknown message type"),
        ([True, 0, 1, 2, 3, 4], "unknown message type"),
        (["AppendEntries", 0], "unknown message type"),
        ([Heartbeat.TAG], "array"),
        ({"tag": 1}, "array"),
        (5, "array"),
        ([VoteRequest.TAG, 0, 1, 2, 3, 4, 5, 1, False], "bool"),
        ([AppendEntries.TAG, 0, 1, 2, 3, 4, 5, 6, "batches", True, b"", 0], "bytes"),
        ([ErrorReply.TAG, 0, 42, "m", None, None], "ErrorCode"),
        ([ErrorReply.TAG, 0, ErrorCode.AUTH, b"m", None, None], "str"),
        ([ErrorReply.TAG, 0, ErrorCode.AUTH, "m", "1", None], "int"),
        ([StatusReply.TAG, 0, [1, 2]], "dict"),
    ],
)
def test_malformed_bodies_raise_protocol_error(body, reason):
    with pytest.raises(ProtocolError, match=reason):
        decode_body(msgpack.packb(body))


def test_good_body_decodes():
    assert decode_body(msgpack.packb(GOOD)).message == Heartbeat(
        group=1, term=2, leader_id=3, leader_commit=4
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xc1",  # never used in msgpack
        msgpack.packb(GOOD) + b"\x00",  # trailing data
        msgpack.packb(GOOD)[:-1],  # truncated
        msgpack.packb([StatusReply.TAG, 0, {1: "int key"}]),
        b"\xa2\xff\xfe",  # a str that is not UTF-8
        b"\x91" * 5000 + b"\x00",  # nested past msgpack's stack
        b"\xdd\xff\xff\xff\xff",  # an array claiming 4 billion items
        msgpack.packb(msgpack.ExtType(1, b"x")),
    ],
)
def test_undecodable_bodies_raise_protocol_error(raw):
    with pytest.raises(ProtocolError):
        decode_body(raw)


@given(data=st.data())
def test_compiled_checks_agree_with_the_field_by_field_checks(data):
    """The compiled fast path never accepts what the field checks refuse, nor refuses valid."""
    cls = data.draw(st.sampled_from(MESSAGE_TYPES))
    spec = _SPECS_BY_TAG[cls.TAG]
    items = [cls.TAG, 1, *spec.get_fields(data.draw(message_of(cls)))]
    if len(items) > 2 and data.draw(st.booleans()):
        index = data.draw(st.integers(2, len(items) - 1))
        items[index] = data.draw(wire_values)
    fast = spec.decode_fast(items)
    try:
        slow = cls(*[check(value) for check, value in zip(spec.checks, items[2:], strict=True)])
    except ProtocolError:
        slow = None
    # Types with dict fields (not hot) always defer to the field checks.
    assert fast == slow or (
        fast is None
        and cls in (StatusReply, AdminRequest, AdminReply, GroupRequest, TxnRequest, OffsetMapReply)
    )
