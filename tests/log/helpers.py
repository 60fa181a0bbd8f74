"""Shared builders for the log tests."""

from __future__ import annotations

from quorumlog.log.batch import split_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.records import batch_records, make_data_batch
from quorumlog.log.wal import Log, run_inline

SMALL = LogConfig(segment_bytes_max=2_000, index_interval_bytes=300)


def batch_of(*values: bytes, timestamp_ms: int = 0) -> bytes:
    return make_data_batch([(None, v, timestamp_ms, None) for v in values])


def values_in(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a byte string of whole batches."""
    out = []
    for header, batch in split_batches(data):
        for i, record in enumerate(batch_records(batch, header)):
            out.append((header.base_offset + i, record.value))
    return out


def read_all(log: Log, from_offset: int | None = None) -> list[tuple[int, bytes]]:
    offset = log.log_start_offset if from_offset is None else from_offset
    out = []
    while offset <= log.dirty_offset:
        chunk = values_in(log.read(offset, 4096).data)
        out.extend(r for r in chunk if r[0] >= offset)
        offset = chunk[-1][0] + 1
    return out


def open_log(fs, directory: str, config: LogConfig = SMALL, **kwargs) -> Log:
    return Log.open(fs, directory, config, run_sync=run_inline, **kwargs)
