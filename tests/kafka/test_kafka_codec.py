"""Kafka's wire formats without processes: record batches v2 (`log/kafka_batch.py`), as
stored inside quorumlog batches (`log/records.py`), and request frames
(`transport/kafka.py`), checked against kafka-python's own encoders and decoders."""

from __future__ import annotations

import contextlib
import gzip
import struct
import warnings

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.log.batch import BatchError, Compression, build_batch, parse_batch
from quorumlog.log.kafka_batch import (
    CONTROL,
    HEADER,
    HEADER_BYTES,
    TRANSACTIONAL,
    UnsupportedCompressionError,
    check_for_append,
    check_records,
    encode_batch,
    parse_header,
    placed,
    records_of,
    split_batches,
)
from quorumlog.log.kafka_compression import GZIP, LZ4, SNAPPY, XERIAL_MAGIC, ZSTD, decompress
from quorumlog.log.kafka_compression import NONE as NO_COMPRESSION
from quorumlog.log.records import RawRecord, batch_records
from quorumlog.transport.kafka import (
    SUPPORTED,
    FrameError,
    Request,
    encode_response,
    parse_request,
    unsupported_response,
)

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (key, value, timestamp_ms, headers): every shape a Kafka record can take.
RECORDS = [
    (b"k0", b"v0", 1_700_000_000_000, [("trace", b"abc"), ("empty", b"")]),
    (None, b"no key", 1_700_000_000_005, None),
    (b"tombstone", None, 1_699_999_999_990, []),  # earlier than the first: a negative delta
    (b"", b"", 1_700_000_000_007, [("null header", None), ("\u00e9t\u00e9", b"\x00\xff")]),
    (b"big", bytes(range(256)) * 40, 1_700_000_000_100, [("h", b"x" * 300)]),
]

keys_values = st.one_of(st.none(), st.binary(max_size=200))
header_lists = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=50))), max_size=4
    ),
)
record_lists = st.lists(
    st.tuples(
        keys_values,
        keys_values,
        st.integers(min_value=0, max_value=2**41),
        header_lists,
    ),
    min_size=1,
    max_size=20,
)


def as_read(records) -> list[tuple]:
    """What records_of gives for `(key, value, ts, headers)` records written from offset 0."""
    return [
        (i, ts, key, value, list(headers or []))
        for i, (key, value, ts, headers) in enumerate(records)
    ]


def read_back(batch: bytes) -> list[tuple]:
    header = parse_header(batch)
    return [tuple(r) for r in records_of(batch, header)]


def recompressed(batch: bytes, codec: int, compress) -> bytes:
    """`batch` with its records section compressed by `compress`, the attributes' codec bits
    set to `codec`, and the length and CRC recomputed (the module docstring's layout)."""
    header = bytearray(batch[:HEADER_BYTES])
    body = compress(batch[HEADER_BYTES:])
    struct.pack_into(">i", header, 8, HEADER_BYTES - 12 + len(body))
    attributes = struct.unpack_from(">h", header, 21)[0]
    struct.pack_into(">h", header, 21, (attributes & ~0x07) | codec)
    return sealed(bytes(header), body)


def snappy_raw(data: bytes) -> bytes:
    """One plain snappy block, as librdkafka writes it."""
    return bytes(cramjam.snappy.compress_raw(data))


def snappy_xerial(data: bytes, block_bytes: int = 1000) -> bytes:
    """Xerial's framing, as Kafka's Java client writes it: a header, then blocks of at most
    `block_bytes` (before compression), each after its length."""
    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block_bytes):
        block = snappy_raw(data[i : i + block_bytes])
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


CODECS = [
    pytest.param(GZIP, gzip.compress, id="gzip"),
    pytest.param(ZSTD, zstandard.ZstdCompressor(level=3).compress, id="zstd"),
    pytest.param(SNAPPY, snappy_raw, id="snappy"),
    pytest.param(SNAPPY, snappy_xerial, id="snappy-xerial"),
    pytest.param(LZ4, lz4.frame.compress, id="lz4"),
]


def sealed(header: bytes, body: bytes) -> bytes:
    """A header and records section with the CRC (of bytes 21 on) recomputed."""
    out = bytearray(header + body)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def raw_batch(attributes: int, count: int, body: bytes, last_offset_delta: int | None = None):
    """A batch with a valid CRC around any records section (for malformed contents)."""
    last = count - 1 if last_offset_delta is None else last_offset_delta
    header = HEADER.pack(
        0, HEADER_BYTES - 12 + len(body), 0, 2, 0, attributes, last, 0, 0, -1, -1, -1, count
    )
    return sealed(header, body)


# ------------------------------------------------------------------ record batches


def test_encoded_records_read_back_field_for_field():
    batch = encode_batch(41, 3, RECORDS)
    header = parse_header(batch)
    assert header.base_offset == 41
    assert header.leader_epoch == 3
    assert header.magic == 2
    assert header.records_count == len(RECORDS)
    assert header.last_offset_delta == len(RECORDS) - 1
    assert header.base_timestamp == RECORDS[0][2]
    assert header.max_timestamp == max(r[2] for r in RECORDS)
    assert header.compression == NO_COMPRESSION
    assert header.total_bytes == len(batch)
    check_for_append(header)
    assert read_back(batch) == as_read(RECORDS)


@given(records=record_lists, base_offset=st.integers(0, 2**62), epoch=st.integers(-1, 2**31 - 1))
@FUZZ
def test_any_records_round_trip(records, base_offset, epoch):
    batch = encode_batch(base_offset, epoch, records)
    header = parse_header(batch)
    assert (header.base_offset, header.leader_epoch) == (base_offset, epoch)
    assert read_back(batch) == as_read(records)


def test_kafka_pythons_reader_reads_what_encode_batch_writes():
    batch = encode_batch(100, 0, RECORDS)
    reader = DefaultRecordBatch(bytearray(batch))
    assert reader.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in reader]
    assert got == [(100 + i, ts, k, v, list(h or [])) for i, (k, v, ts, h) in enumerate(RECORDS)]


@pytest.mark.parametrize("codec", [NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD])
def test_batches_built_by_kafka_python_read_back(codec):
    """kafka-python's snappy is xerial-framed, as the Java client's."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=7,
        producer_epoch=1,
        base_sequence=5,
        batch_size=1 << 20,
    )
    for i, (key, value, ts, headers) in enumerate(RECORDS):
        builder.append(i, timestamp=ts, key=key, value=value, headers=list(headers or []))
    batch = bytes(builder.build())
    header = parse_header(batch)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 5)
    check_for_append(header)
    assert read_back(batch) == as_read(RECORDS)


def test_placed_moves_a_batch_and_keeps_its_crc_valid():
    batch = encode_batch(0, 0, RECORDS)
    moved = placed(batch, 9_000_000_000, 17)
    header = parse_header(moved)
    assert (header.base_offset, header.leader_epoch) == (9_000_000_000, 17)
    assert header.crc == parse_header(batch).crc
    assert moved[12:] != batch[12:] and moved[16:] == batch[16:]
    assert read_back(moved) == read_back(batch)
    assert placed(memoryview(moved), 0, 0) == batch


@pytest.mark.parametrize("position", [16, 17, 20, 21, 30, 56, 60, 61, -1])
def test_a_corrupted_byte_fails_the_crc(position):
    batch = bytearray(encode_batch(0, 0, RECORDS))
    batch[position] ^= 0x01
    with pytest.raises(BatchError):
        parse_header(bytes(batch))
    with pytest.raises(BatchError):
        split_batches(bytes(batch))


def test_every_single_corrupted_byte_under_the_crc_is_caught():
    batch = encode_batch(0, 0, RECORDS[:2])
    for position in range(17, len(batch)):
        damaged = bytearray(batch)
        damaged[position] ^= 0x80
        with pytest.raises(BatchError, match="CRC"):
            parse_header(bytes(damaged))


def test_split_batches_takes_a_concatenation_apart_and_refuses_a_truncated_one():
    first, second = encode_batch(0, 0, RECORDS[:2]), encode_batch(0, 0, RECORDS[2:])
    parts = split_batches(first + second)
    assert [bytes(view) for _, view in parts] == [first, second]
    assert [h.records_count for h, _ in parts] == [2, len(RECORDS) - 2]
    assert split_batches(b"") == []
    for cut in (1, HEADER_BYTES - 1, HEADER_BYTES, len(second) - 1):
        with pytest.raises(BatchError):
            split_batches(first + second[:cut])


def test_only_magic_2_is_read():
    batch = bytearray(encode_batch(0, 0, RECORDS))
    batch[16] = 1
    with pytest.raises(BatchError, match="magic"):
        parse_header(bytes(batch))


@pytest.mark.parametrize(("codec", "compress"), CODECS)
def test_compressed_batches_decode(codec, compress):
    batch = recompressed(encode_batch(10, 0, RECORDS), codec, compress)
    header = parse_header(batch)
    assert header.compression == codec
    assert header.total_bytes == len(batch) < len(encode_batch(10, 0, RECORDS))
    check_for_append(header)
    assert read_back(batch) == as_read(RECORDS)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codecs_kafka_has_not_defined_are_refused_for_append(codec):
    batch = recompressed(encode_batch(0, 0, RECORDS), codec, lambda body: body)
    header = parse_header(batch)  # the CRC is fine
    with pytest.raises(UnsupportedCompressionError, match="not supported"):
        check_for_append(header)
    with pytest.raises(UnsupportedCompressionError):
        records_of(batch, header)


@pytest.mark.parametrize(
    ("flag", "why"),
    [(CONTROL, "transaction coordinator"), (TRANSACTIONAL, "without a producer id")],
)
def test_control_batches_and_transactional_ones_without_a_producer_are_refused(flag, why):
    batch = bytearray(encode_batch(0, 0, RECORDS))
    struct.pack_into(">h", batch, 21, flag)
    header = parse_header(sealed(bytes(batch[:HEADER_BYTES]), bytes(batch[HEADER_BYTES:])))
    with pytest.raises(BatchError, match=why):
        check_for_append(header)


def test_a_batch_whose_offsets_do_not_match_its_count_is_refused_for_append():
    body = encode_batch(0, 0, RECORDS[:2])[HEADER_BYTES:]
    with pytest.raises(BatchError, match="last offset delta"):
        check_for_append(parse_header(raw_batch(0, 2, body, last_offset_delta=5)))


def test_garbage_inside_a_valid_crc_is_a_batch_error():
    good = encode_batch(0, 0, RECORDS[:2])[HEADER_BYTES:]
    for body, count in [
        (good, 3),  # fewer records than the count
        (good, 1),  # bytes left over
        (good[:-1], 2),  # the last record runs past the batch
        (b"\xff" * 12, 1),  # a varint longer than 64 bits
        (b"\x01", 1),  # a record length with nothing after it
    ]:
        batch = raw_batch(0, count, body)
        with pytest.raises(BatchError):
            records_of(batch, parse_header(batch))
    for codec in (GZIP, SNAPPY, LZ4, ZSTD):
        batch = raw_batch(codec, 2, b"not compressed at all")
        with pytest.raises(BatchError, match="undecodable"):
            records_of(batch, parse_header(batch))
    batch = raw_batch(GZIP, 2, gzip.compress(good)[:-4])  # truncated gzip stream
    with pytest.raises(BatchError):
        records_of(batch, parse_header(batch))


@pytest.mark.parametrize(("codec", "compress"), CODECS)
def test_compressed_records_past_the_limit_or_cut_short_are_a_batch_error(codec, compress):
    """A bomb (a few bytes that decompress to gigabytes) stops at the limit."""
    data = bytes(5000)
    assert decompress(memoryview(compress(data)), codec, 5000) == data
    with pytest.raises(BatchError, match="more than 4999 bytes"):
        decompress(memoryview(compress(data)), codec, 4999)
    whole = encode_batch(0, 0, RECORDS)
    cut = raw_batch(codec, len(RECORDS), compress(whole[HEADER_BYTES:])[:-3])
    with pytest.raises(BatchError):
        records_of(cut, parse_header(cut))


def test_a_kafka_batch_stored_in_a_quorumlog_batch_reads_as_native_records():
    kafka = recompressed(encode_batch(0, 0, RECORDS), GZIP, gzip.compress)
    stored = build_batch(kafka, record_count=len(RECORDS), compression=Compression.KAFKA)
    header = parse_batch(stored)
    assert header.compression is Compression.KAFKA
    # A null value stays None (a tombstone); a null header value, which native headers do
    # not have, reads as b"".
    assert any(value is None for _, value, _, _ in RECORDS)
    assert batch_records(stored, header) == [
        RawRecord(key, value, ts, [(name, hv or b"") for name, hv in headers or []] or None)
        for key, value, ts, headers in RECORDS
    ]


def test_a_quorumlog_batch_claiming_more_records_than_its_kafka_batch_holds_is_refused():
    kafka = encode_batch(0, 0, RECORDS)
    stored = build_batch(kafka, record_count=len(RECORDS) + 1, compression=Compression.KAFKA)
    with pytest.raises(BatchError, match="claims"):
        batch_records(stored, parse_batch(stored))


@given(data=st.binary(max_size=300))
@FUZZ
def test_arbitrary_bytes_are_only_ever_a_batch_error(data):
    with contextlib.suppress(BatchError):
        for header, view in split_batches(data):
            records_of(view, header)


@given(
    attributes=st.integers(-(2**15), 2**15 - 1),
    count=st.integers(-3, 40),
    body=st.one_of(
        st.binary(max_size=300),
        st.builds(lambda r: encode_batch(0, 0, r)[HEADER_BYTES:], record_lists),
    ),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
    compress=st.sampled_from(
        [
            None,
            gzip.compress,
            zstandard.ZstdCompressor().compress,
            snappy_raw,
            snappy_xerial,
            lz4.frame.compress,
        ]
    ),
)
@FUZZ
def test_any_records_section_under_a_valid_crc_is_only_ever_a_batch_error(
    attributes, count, body, flips, compress
):
    """Past the CRC, where a buggy producer's bytes get to: decoding must refuse, not crash,
    and the leader's check (`check_records`) must refuse exactly what decoding refuses."""
    damaged = bytearray(body)
    for position, mask in flips:
        if damaged:
            damaged[position % len(damaged)] ^= mask
    if compress is not None:
        damaged = bytearray(compress(bytes(damaged)))
    batch = raw_batch(attributes, count, bytes(damaged))
    header = parse_header(batch)
    with contextlib.suppress(BatchError):
        check_for_append(header)

    def decodes(read) -> bool:
        try:
            read(batch, header)
        except BatchError:
            return False
        return True

    assert decodes(check_records) == decodes(records_of)


# ------------------------------------------------------------------------ requests


def framed(message, correlation_id: int, client_id: str | None = "tests") -> bytes:
    """A kafka-python request as it goes on the wire (size, header v1 or v2, body)."""
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    data = bytes(message.encode(header=True, framed=True))
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    return data


@pytest.mark.parametrize("version", range(SUPPORTED[3][0], SUPPORTED[3][1] + 1))
def test_a_metadata_request_from_kafka_python_parses(version):
    topics = [MetadataRequest.MetadataRequestTopic(name=n) for n in ("orders", "pay\u00e9")]
    fields = {"allow_auto_topic_creation": False} if version >= 4 else {}
    data = framed(MetadataRequest[version](topics=topics, **fields), 2**31 - 1, "my-app")
    request = parse_request(data[4:])
    assert (request.api_key, request.version) == (3, version)
    assert request.correlation_id == 2**31 - 1
    assert request.client_id == "my-app"
    assert [t.name for t in request.body.topics] == ["orders", "pay\u00e9"]


def test_an_all_topics_metadata_request_parses_with_null_topics():
    request = parse_request(framed(MetadataRequest[1](topics=None), -5, None)[4:])
    assert (request.api_key, request.version, request.correlation_id) == (3, 1, -5)
    assert request.client_id is None
    assert request.body.topics is None


@pytest.mark.parametrize("version", range(SUPPORTED[18][0], SUPPORTED[18][1] + 1))
def test_a_supported_api_versions_request_parses(version):
    message = ApiVersionsRequest[version]()
    if version >= 3:
        message = ApiVersionsRequest[version](
            client_software_name="kafka-python", client_software_version="3"
        )
    request = parse_request(framed(message, 7)[4:])
    assert (request.api_key, request.version, request.correlation_id) == (18, version, 7)
    assert request.body is not None


def test_a_newer_api_versions_request_gets_a_v0_answer_with_the_version_table():
    """KIP-511: a client that opens with an ApiVersions newer than served (Kafka 4.4's v5,
    the same body as v4) hears UNSUPPORTED_VERSION in v0 with the versions served, and
    retries with one of them."""
    message = ApiVersionsRequest[4](
        client_software_name="kafka-python", client_software_version="3"
    )
    frame = bytearray(framed(message, 4242)[4:])
    struct.pack_into(">h", frame, 2, 5)  # the header's version
    request = parse_request(bytes(frame))
    assert (request.api_key, request.version, request.correlation_id) == (18, 5, 4242)
    assert request.body is None
    answer = unsupported_response(request)
    response = ApiVersionsResponse.decode(answer, version=0, header=True, framed=True)
    assert response.header.correlation_id == 4242
    assert response.version == 0
    assert response.error_code == 35  # UNSUPPORTED_VERSION
    assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} == {
        (key, low, high) for key, (low, high) in SUPPORTED.items()
    }


def test_an_unsupported_api_key_is_answered_with_its_correlation_id():
    # DescribeClientQuotas v0: a throttle, the error, a null message, no entries.
    frame = struct.pack(">hhi", 48, 0, 99) + b"\x00\x02me" + b"\x00" * 20
    request = parse_request(frame)
    assert (request.api_key, request.version, request.correlation_id, request.body) == (
        48,
        0,
        99,
        None,
    )
    answer = unsupported_response(request)
    size, correlation_id, throttle_ms, error = struct.unpack_from(">iiih", answer)
    assert (size, correlation_id, throttle_ms, error) == (len(answer) - 4, 99, 0, 35)


def test_an_api_key_no_schema_knows_is_answered_with_its_correlation_id():
    answer = unsupported_response(Request(31_000, 0, 123, None, None))
    assert struct.unpack(">iih", answer) == (6, 123, 35)


# API keys and versions whose error answer fails to build (TypeError in transport/kafka.py
# `_zero`): the listener drops their connection instead of answering.
BROKEN_ERROR_ANSWERS = [(38, 1), (38, 2), (38, 3), (39, 1), (39, 2), (40, 1), (40, 2), (82, 0)]
UNSUPPORTED = [
    (key, version)
    for key in range(90)
    for version in range(18)
    if not SUPPORTED.get(key, (1, 0))[0] <= version <= SUPPORTED.get(key, (1, 0))[1]
]


def answers_with_correlation_id(api_key: int, version: int) -> bool:
    answer = unsupported_response(Request(api_key, version, 31337, "c", None))
    size, correlation_id = struct.unpack_from(">ii", answer)
    return size == len(answer) - 4 and correlation_id == 31337


def test_every_unsupported_api_and_version_is_answered_with_its_correlation_id():
    wrong = [
        (key, version)
        for key, version in UNSUPPORTED
        if (key, version) not in BROKEN_ERROR_ANSWERS
        and not answers_with_correlation_id(key, version)
    ]
    assert wrong == []


def test_unsupported_delegation_token_and_raft_voter_calls_are_answered():
    assert all(answers_with_correlation_id(key, version) for key, version in BROKEN_ERROR_ANSWERS)


@given(frame=st.binary(max_size=200))
@FUZZ
def test_arbitrary_bytes_parse_to_a_request_or_a_frame_error(frame):
    try:
        request = parse_request(frame)
    except FrameError:
        return
    assert isinstance(request, Request)


@given(
    api=st.sampled_from(sorted(SUPPORTED)),
    version=st.integers(0, 12),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.one_of(st.none(), st.text(max_size=10)),
    body=st.binary(max_size=200),
)
@FUZZ
def test_a_well_formed_header_over_any_body_parses_or_is_a_frame_error(
    api, version, correlation_id, client_id, body
):
    """Past the header, into every request schema served."""
    if client_id is None:
        encoded_id = b"\xff\xff"
    else:
        raw = client_id.encode()
        encoded_id = struct.pack(">h", len(raw)) + raw
    frame = struct.pack(">hhi", api, version, correlation_id) + encoded_id + body
    try:
        request = parse_request(frame)
    except FrameError:
        return
    assert isinstance(request, Request)
    assert (request.api_key, request.version) == (api, version)
    assert request.correlation_id == correlation_id
    assert request.client_id == client_id
    low, high = SUPPORTED[api]
    assert (request.body is not None) == (low <= version <= high)


def test_make_fills_zeros_but_needs_a_nested_entity_given():
    """`make` works out each entity's fields once: a field whose type has no zero (a
    nested entity) is refused only when it is missing, not when another is made."""
    describe = Request(69, 1, 9, "c", None)
    assignment = {"topic_partitions": [{"topic_name": "t", "partitions": [0, 1]}]}
    member = {"member_id": "m", "assignment": assignment, "target_assignment": assignment}
    answer = encode_response(describe, {"groups": [{"group_id": "g", "members": [member]}]})
    assert struct.unpack_from(">ii", answer) == (len(answer) - 4, 9)
    del member["target_assignment"]
    with pytest.raises(TypeError, match="no zero value"):
        encode_response(describe, {"groups": [{"group_id": "g", "members": [member]}]})
