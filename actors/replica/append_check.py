"""What a partition leader checks in a client append before it goes to the log."""

from __future__ import annotations

from quorumlog.log.batch import (
    COMPACTED,
    SNAPSHOT,
    TRANSACTIONAL,
    TXN_MARKER,
    TYPES_CHECKED,
    BatchError,
    BatchHeader,
    BatchType,
    split_batches,
)
from quorumlog.log.records import field_type_problem, keyless_record
from quorumlog.transport.messages import AppendRequest, ErrorCode, ErrorReply


def checked_batches(
    request: AppendRequest,
    append_bytes_max: int,
    not_leader: ErrorReply | None,
    by_client: bool = True,
    batch_bytes_max: int | None = None,
    keys_required: bool = False,
    transactional: bool = False,
) -> list[tuple[BatchHeader, memoryview]] | ErrorReply:
    """The request's batches, checked (size, CRCs, types, producer stamp), or why not;
    `not_leader` is this replica's refusal when it does not lead (after the size check).
    `batch_bytes_max` is the topic's max.message.bytes; a compacted topic's records need
    keys (`keys_required`: the cleaner keeps each key's latest). Only the node's own appends may be
    snapshots (they compact a log: log/batch.py) or transaction markers; none is a
    cleaner's COMPACTED batch; a transaction's batches come only where its coordinator
    said the transaction is open (`transactional`: actors/kafka/produce.py asked)."""
    if len(request.batches) > append_bytes_max:
        return ErrorReply(
            ErrorCode.TOO_LARGE,
            f"append of {len(request.batches)} bytes exceeds {append_bytes_max}",
        )
    if not_leader is not None:
        return not_leader
    try:
        batches = split_batches(request.batches)
    except BatchError as exc:
        return ErrorReply(ErrorCode.PROTOCOL, f"bad batch: {exc}")
    if not batches or any(h.batch_type is not BatchType.DATA for h, _ in batches):
        return ErrorReply(ErrorCode.PROTOCOL, "an append carries one or more data batches")
    for header, batch in batches:
        if not header.flags & TYPES_CHECKED and (problem := field_type_problem(batch, header)):
            return ErrorReply(ErrorCode.PROTOCOL, f"bad batch: {problem}")
        if batch_bytes_max is not None and header.total_bytes > batch_bytes_max:
            return ErrorReply(
                ErrorCode.TOO_LARGE,
                f"a batch of {header.total_bytes} bytes exceeds the topic's "
                f"max.message.bytes of {batch_bytes_max}",
            )
        if by_client and header.flags & SNAPSHOT:
            return ErrorReply(ErrorCode.PROTOCOL, "bad batch: the snapshot flag is the node's own")
        if by_client and header.flags & TXN_MARKER:
            return ErrorReply(
                ErrorCode.PROTOCOL, "bad batch: only a transaction coordinator writes markers"
            )
        if header.flags & TRANSACTIONAL and not transactional:
            return ErrorReply(
                ErrorCode.PROTOCOL, "bad batch: a transaction's batch comes within its transaction"
            )
        if header.flags & COMPACTED:
            return ErrorReply(ErrorCode.PROTOCOL, "bad batch: only the cleaner compacts a batch")
        if keys_required and (refused := _keyless(batch, header)) is not None:
            return refused
    if request.producer_id >= 0 and (
        len(batches) != 1
        or (batches[0][0].producer_id, batches[0][0].producer_seq)
        != (request.producer_id, request.producer_seq)
    ):
        return ErrorReply(
            ErrorCode.PROTOCOL,
            "an idempotent append is one batch stamped with its producer id and sequence",
        )
    return batches


def _keyless(batch: memoryview, header: BatchHeader) -> ErrorReply | None:
    try:
        keyless = keyless_record(batch, header)
    except BatchError as exc:
        return ErrorReply(ErrorCode.PROTOCOL, f"bad batch: {exc}")
    if keyless is None:
        return None
    return ErrorReply(
        ErrorCode.INVALID_RECORD,
        f"record {keyless} of the batch has no key: a compacted topic keeps each key's "
        "latest record, so every record needs one",
    )
