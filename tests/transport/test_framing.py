import contextlib
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.raft.messages import AppendEntries, Heartbeat
from quorumlog.transport.codec import LENGTH_PREFIX, encode_frame
from quorumlog.transport.errors import ProtocolError
from quorumlog.transport.framing import (
    READ_BYTES_MAX,
    READ_BYTES_MIN,
    RETAINED_BYTES_MAX,
    FrameDecoder,
    decode_frame,
)
from quorumlog.transport.messages import StatusRequest
from tests.transport.strategies import any_message, correlation_ids

frames_of_messages = st.lists(st.tuples(correlation_ids, any_message), min_size=1, max_size=6)


@given(items=frames_of_messages)
def test_one_byte_at_a_time(items):
    data = b"".join(encode_frame(cid, message) for cid, message in items)
    decoder = FrameDecoder()
    decoded = []
    for i in range(len(data)):
        decoder.feed(data[i : i + 1])
        decoded.extend(decoder)
    assert [(f.correlation_id, f.message) for f in decoded] == items
    assert decoder.buffered_bytes == 0


@given(items=frames_of_messages, cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_any_split_into_chunks(items, cuts):
    data = b"".join(encode_frame(cid, message) for cid, message in items)
    bounds = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    decoder = FrameDecoder()
    decoded = []
    for start, end in itertools.pairwise(bounds):
        decoder.feed(memoryview(data)[start:end])
        decoded.extend(decoder)
    assert [(f.correlation_id, f.message) for f in decoded] == items


def test_oversized_length_is_refused_from_the_prefix_alone():
    decoder = FrameDecoder(frame_bytes_max=1024)
    decoder.feed(LENGTH_PREFIX.pack(1025))
    with pytest.raises(ProtocolError, match="exceeds frame_bytes_max"):
        decoder.next_frame()
    # The stream is out of step for good.
    with pytest.raises(ProtocolError):
        decoder.feed(encode_frame(1, StatusRequest()))
    with pytest.raises(ProtocolError):
        decoder.next_frame()


def test_frame_at_the_limit_is_accepted():
    frame = encode_frame(
        1,
        AppendEntries(
            group=1,
            term=1,
            leader_id=1,
            prev_offset=1,
            prev_term=1,
            leader_commit=1,
            batches=b"x" * 1000,
            flush=True,
        ),
    )
    decoder = FrameDecoder(frame_bytes_max=len(frame) - LENGTH_PREFIX.size)
    decoder.feed(frame)
    assert decoder.next_frame() is not None


def test_half_frame_waits_and_reports_what_it_holds():
    frame = encode_frame(3, Heartbeat(group=1, term=2, leader_id=3, leader_commit=6))
    decoder = FrameDecoder()
    decoder.feed(frame[:-3])
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == len(frame) - 3
    decoder.feed(frame[-3:])
    assert decoder.next_frame().correlation_id == 3


def receive(decoder: FrameDecoder, data: bytes) -> int:
    """Write into the decoder's own buffer, as a socket's recv_into does; returns the room."""
    with decoder.get_buffer() as room:
        size = len(room)
        room[: len(data)] = data
    decoder.buffer_updated(len(data))
    return size


def test_a_large_frame_gets_room_for_exactly_its_rest():
    message = AppendEntries(
        group=1,
        term=1,
        leader_id=1,
        prev_offset=1,
        prev_term=1,
        leader_commit=1,
        batches=bytes(range(256)) * 1200,
        flush=False,
    )
    frame = encode_frame(9, message)
    decoder = FrameDecoder()
    assert receive(decoder, frame[:1000]) == READ_BYTES_MIN
    assert receive(decoder, frame[1000:200_000]) == len(frame) - 1000
    assert decoder.next_frame() is None
    assert receive(decoder, frame[200_000:]) == len(frame) - 200_000
    assert decoder.next_frame().message == message
    assert decoder.buffered_bytes == 0


def test_reads_that_fill_the_room_get_more_room_up_to_a_maximum():
    frame = encode_frame(1, Heartbeat(group=1, term=2, leader_id=3, leader_commit=6))
    stream = frame * (2 * READ_BYTES_MAX // len(frame))
    decoder = FrameDecoder()
    offered = []
    position = 0
    while position < len(stream):
        with decoder.get_buffer() as room:
            chunk = stream[position : position + len(room)]
            room[: len(chunk)] = chunk
            offered.append(len(room))
        decoder.buffer_updated(len(chunk))
        position += len(chunk)
        assert all(
            f.message == Heartbeat(group=1, term=2, leader_id=3, leader_commit=6) for f in decoder
        )
    assert offered[0] == READ_BYTES_MIN and max(offered) == READ_BYTES_MAX
    assert offered == sorted(offered)


def test_buffer_grown_for_a_huge_frame_is_let_go():
    frame = encode_frame(
        1,
        AppendEntries(
            group=1,
            term=1,
            leader_id=1,
            prev_offset=1,
            prev_term=1,
            leader_commit=1,
            batches=b"x" * (3 * RETAINED_BYTES_MAX),
            flush=False,
        ),
    )
    decoder = FrameDecoder()
    receive(decoder, frame[:100])
    assert receive(decoder, frame[100:]) == len(frame) - 100
    assert decoder.next_frame() is not None
    assert len(decoder._buffer) <= RETAINED_BYTES_MAX


def test_decode_frame_takes_exactly_one_frame():
    frame = encode_frame(1, StatusRequest())
    assert decode_frame(frame).message == StatusRequest()
    for bad in (frame[:-1], frame + frame, b""):
        with pytest.raises(ProtocolError):
            decode_frame(bad)


# --- fuzzing: only ProtocolError, and it always ends ------------------------------------


def decode_all(data: bytes, chunk: int) -> int:
    """Feed everything; returns how many frames decoded, raising only ProtocolError."""
    decoder = FrameDecoder(frame_bytes_max=64 * 1024)
    count = 0
    for start in range(0, len(data), chunk):
        decoder.feed(data[start : start + chunk])
        count += sum(1 for _ in decoder)
    return count


@settings(max_examples=300)
@given(data=st.binary(max_size=2000), chunk=st.integers(min_value=1, max_value=64))
def test_random_bytes(data, chunk):
    with contextlib.suppress(ProtocolError):
        decode_all(data, chunk)


@settings(max_examples=300)
@given(
    items=frames_of_messages,
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
            st.integers(0),
            st.integers(0, 255),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_mutated_frames(items, edits):
    data = bytearray(b"".join(encode_frame(cid, message) for cid, message in items))
    for kind, where, value in edits:
        position = where % (len(data) + 1)
        match kind:
            case "flip" if position < len(data):
                data[position] ^= 1 << (value % 8)
            case "set" if position < len(data):
                data[position] = value
            case "cut":
                del data[position:]
            case "insert":
                data[position:position] = bytes([value])
            case "delete":
                del data[position : position + 1 + value % 8]
    with contextlib.suppress(ProtocolError):
        decode_all(bytes(data), chunk=7)


def test_many_seeded_mutations_of_a_realistic_stream():
    rng = random.Random(1234)
    good = b"".join(
        encode_frame(
            i,
            AppendEntries(
                group=1,
                term=5,
                leader_id=2,
                prev_offset=i,
                prev_term=4,
                leader_commit=i,
                batches=rng.randbytes(rng.randrange(0, 3000)),
                flush=i % 2 == 0,
            ),
        )
        for i in range(1, 6)
    )
    outcomes = {"decoded": 0, "refused": 0}
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            decode_all(bytes(data), chunk=rng.randrange(1, 5000))
            outcomes["decoded"] += 1
        except ProtocolError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and outcomes["decoded"] > 0
