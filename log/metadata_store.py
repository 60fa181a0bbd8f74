"""The file of a replica's consensus metadata (log/metadata.py).

It is written whole, atomically (temp file, fsync, rename, fsync directory: storage rule 7),
before any reply that depends on it (rule 1). A torn, damaged or unreadable file is
corruption: never "start fresh" on it (rule 5).

File layout: b"QLM1", CRC32C (u32, little-endian) of the body, then the msgpack body.
"""

from __future__ import annotations

import os
import struct

import msgpack
from crc32c import crc32c

from quorumlog.log.files import CorruptionError, FileSystem, read_whole_file, write_file_atomically
from quorumlog.log.metadata import ConsensusMetadata

METADATA_FILE = "consensus.meta"
_MAGIC = b"QLM1"
_PREFIX = struct.Struct("<4sI")


def encode(meta: ConsensusMetadata) -> bytes:
    body = msgpack.packb(
        {
            "incarnation": meta.incarnation,
            "current_term": meta.current_term,
            "voted_for": meta.voted_for,
            "config": meta.config,
            "config_offset": meta.config_offset,
            "vote_after_offset": meta.vote_after_offset,
            "known_commit_offset": meta.known_commit_offset,
        },
        use_bin_type=True,
    )
    return _PREFIX.pack(_MAGIC, crc32c(body)) + body


def decode(data: bytes, path: str) -> ConsensusMetadata:
    if len(data) < _PREFIX.size:
        raise CorruptionError(path, 0, "metadata file is truncated")
    magic, crc = _PREFIX.unpack_from(data)
    body = data[_PREFIX.size :]
    if magic != _MAGIC:
        raise CorruptionError(path, 0, "metadata file has a bad magic number")
    if crc32c(body) != crc:
        raise CorruptionError(path, _PREFIX.size, "metadata checksum mismatch")
    try:
        fields = msgpack.unpackb(body, raw=False)
        meta = ConsensusMetadata(
            incarnation=fields["incarnation"],
            current_term=fields["current_term"],
            voted_for=fields["voted_for"],
            config=fields["config"],
            config_offset=fields["config_offset"],
            vote_after_offset=fields["vote_after_offset"],
            known_commit_offset=fields["known_commit_offset"],
        )
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
        raise CorruptionError(path, _PREFIX.size, f"undecodable metadata: {exc}") from None
    if not isinstance(meta.current_term, int) or meta.current_term < 0:
        raise CorruptionError(path, _PREFIX.size, "metadata has an invalid term")
    return meta


class MetadataStore:
    """Reads and durably writes the metadata file of one data directory."""

    def __init__(self, fs: FileSystem, directory: str):
        self._fs = fs
        self._dir = directory
        self.path = os.path.join(directory, METADATA_FILE)

    def load(self) -> ConsensusMetadata | None:
        """The stored metadata, or None if this directory never had any."""
        if not self._fs.exists(self.path):
            return None
        return decode(read_whole_file(self._fs, self.path), self.path)

    def save(self, meta: ConsensusMetadata) -> None:
        """Blocking: the caller runs it in a worker thread (or inline in a simulation)."""
        self._fs.makedirs(self._dir)
        write_file_atomically(self._fs, self.path, encode(meta))
