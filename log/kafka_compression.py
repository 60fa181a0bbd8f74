"""The codecs of Kafka's record batches, decompressed with a bound on what they may grow to.

Kafka's producers compress a batch's records with one of gzip, snappy, lz4 or zstd (the
batch's attributes say which). Snappy comes two ways: the Java client (and kafka-python)
write xerial's framing, a header then blocks each with its length; librdkafka writes one
plain snappy block. Kafka's brokers read both, so this does. Lz4 is the LZ4 frame format.
A bomb (a few bytes that decompress to gigabytes) is refused once past `limit`.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from quorumlog.log.batch import BatchError

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16  # the magic, then two int32 versions
_BLOCK_LENGTH = struct.Struct(">i")
_SnappyError = cramjam.DecompressionError


class UnsupportedCompressionError(BatchError):
    """A codec number Kafka has not defined (5-7)."""


def check_codec(codec: int) -> None:
    if codec not in NAMES:
        raise UnsupportedCompressionError(
            f"compression codec {codec} is not supported (use {', '.join(NAMES.values())})"
        )


def decompress(body: memoryview, codec: int, limit: int) -> bytes:
    """The records section of a batch compressed with `codec`; BatchError if it does not
    decompress, or to more than `limit` bytes."""
    check_codec(codec)
    try:
        return _READERS[codec](body, limit)
    # RuntimeError: what python-lz4 raises for a bad frame.
    except (OSError, EOFError, RuntimeError, zlib.error, zstandard.ZstdError, _SnappyError) as exc:
        raise BatchError(f"undecodable compressed records: {exc}") from None


def _gzip(body: memoryview, limit: int) -> bytes:
    return _bounded(gzip.GzipFile(fileobj=_Reader(body)).read, limit)


def _zstd(body: memoryview, limit: int) -> bytes:
    return _bounded(zstandard.ZstdDecompressor().stream_reader(bytes(body)).read, limit)


def _snappy(body: memoryview, limit: int) -> bytes:
    if bytes(body[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        return _snappy_block(body, limit)
    out = bytearray()
    pos = _XERIAL_HEADER_BYTES
    while pos < len(body):
        if pos + 4 > len(body):
            raise BatchError("undecodable compressed records: a snappy block cut short")
        (size,) = _BLOCK_LENGTH.unpack_from(body, pos)
        if size < 0 or pos + 4 + size > len(body):
            raise BatchError(f"undecodable compressed records: a snappy block of {size} bytes")
        out += _snappy_block(body[pos + 4 : pos + 4 + size], limit, len(out))
        pos += 4 + size
    return bytes(out)


def _snappy_block(block: memoryview, limit: int, before: int = 0) -> bytes:
    """One plain snappy block (after `before` bytes of its records): its first varint
    says how long it decompresses to."""
    if before + cramjam.snappy.decompress_raw_len(block) > limit:
        raise BatchError(f"records decompress to more than {limit} bytes")
    return bytes(cramjam.snappy.decompress_raw(block))


def _lz4(body: memoryview, limit: int) -> bytes:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    data = decompressor.decompress(body, max_length=limit + 1)
    if len(data) > limit:
        raise BatchError(f"records decompress to more than {limit} bytes")
    if not decompressor.eof or decompressor.unused_data:
        raise BatchError("undecodable compressed records: not one whole lz4 frame")
    return data


def _bounded(read, limit: int) -> bytes:
    data = read(limit + 1)
    if len(data) > limit:
        raise BatchError(f"records decompress to more than {limit} bytes")
    return data


_READERS = {
    NONE: lambda body, limit: bytes(body),
    GZIP: _gzip,
    SNAPPY: _snappy,
    LZ4: _lz4,
    ZSTD: _zstd,
}


class _Reader:
    """A file over a memoryview, for GzipFile (no copy of the compressed bytes)."""

    def __init__(self, view: memoryview):
        self._view = view
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._view) if size < 0 else self._pos + size
        out = bytes(self._view[self._pos : end])
        self._pos += len(out)
        return out
