"""`Client`: the blocking Python client (plain sockets, thread-safe, no event loop).

Leader discovery follows KUDU-1353's lesson: what a node says about the leader is a hint.
On not_leader, a lost connection or an unreachable broker the client tries the hinted
leader or the next broker, with jittered backoff, until the call's deadline; then it raises
a definite QuorumLogError. Nothing here can block past the deadline.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from log.batch import BatchError, BatchType, split_batches
from log.records import batch_records, make_data_batch
from quorumlog.connection import ConnectionLost, SyncConnection
from quorumlog.errors import (
    CallTimeoutError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    QuorumLogError,
    TooLargeError,
    UnreachableError,
)
from transport.messages import (
    Acks,
    AppendReply,
    AppendRequest,
    EndOffsetReply,
    EndOffsetRequest,
    ErrorCode,
    ErrorReply,
    Message,
    ReadReply,
    ReadRequest,
    StatusReply,
    StatusRequest,
)

ACKS = {"quorum": Acks.QUORUM, "leader": Acks.LEADER, "none": Acks.NONE}
BATCH_BYTES_MAX = 1024 * 1024  # records per batch, before compression
RECORD_BYTES_MAX = 4 * 1024 * 1024
READ_BYTES_MAX = 1024 * 1024
BACKOFF_S_MIN = 0.02
BACKOFF_S_MAX = 0.5


@dataclass(frozen=True, slots=True)
class Record:
    value: bytes
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: list[tuple[str, bytes]] | None = None
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed and the durability the leader saw when it answered."""

    first_offset: int
    last_offset: int
    commit_offset: int
    majority_flushed_offset: int
    majority_dirty_offset: int


def parse_brokers(brokers: str | Sequence[str]) -> list[str]:
    items = brokers.split(",") if isinstance(brokers, str) else list(brokers)
    out = [b.strip() for b in items if b.strip()]
    if not out:
        raise QuorumLogError("no brokers given")
    return out


class Client:
    def __init__(
        self,
        brokers: str | Sequence[str],
        secret: bytes | str | None = None,
        timeout: float = 10.0,
        direct: bool = False,
    ):
        self.brokers = parse_brokers(brokers)
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.timeout = timeout
        self.direct = direct
        self._lock = threading.Lock()
        self._connections: dict[str, SyncConnection] = {}
        self._leader: str | None = None
        self._rng = random.Random()
        # Idempotent producer: a random id per client, a sequence per append request.
        self._producer_id = self._rng.getrandbits(62)
        self._seq = -1

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()

    # ------------------------------------------------------------------- the calls

    def append(
        self,
        records: Iterable[bytes | Record],
        acks: str = "quorum",
        details: bool = False,
    ) -> int | AppendResult | None:
        """Append records; returns the offset of the first (None with acks="none")."""
        if acks not in ACKS:
            raise QuorumLogError(f"acks must be one of {', '.join(ACKS)}, not {acks!r}")
        requests = self._append_requests(list(records), ACKS[acks])
        deadline = time.monotonic() + self.timeout
        first: AppendReply | None = None
        last: AppendReply | None = None
        for request in requests:
            reply = self._call(request, deadline, leader=True)
            assert isinstance(reply, AppendReply)
            first = first or reply
            last = reply
        if first is None or last is None or first.first_offset is None:
            return None
        if details:
            return AppendResult(
                first.first_offset,
                last.last_offset,
                last.commit_offset,
                last.majority_flushed_offset,
                last.majority_dirty_offset,
            )
        return first.first_offset

    def read(self, offset: int, max_records: int = 1000) -> list[Record]:
        """Committed records from `offset` on; [] at or past the committed end."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset} is negative")
        deadline = time.monotonic() + self.timeout
        out: list[Record] = []
        position = offset
        while len(out) < max_records:
            reply = self._call(ReadRequest(position, READ_BYTES_MAX), deadline, leader=True)
            assert isinstance(reply, ReadReply)
            if not reply.batches:
                break
            try:
                batches = split_batches(reply.batches)
            except BatchError as exc:
                raise QuorumLogError(f"damaged data from the cluster: {exc}") from None
            for header, batch in batches:
                position = header.last_offset + 1
                if header.batch_type is not BatchType.DATA:
                    continue
                for i, raw in enumerate(batch_records(batch, header)):
                    at = header.base_offset + i
                    if at >= offset and len(out) < max_records:
                        out.append(Record(raw.value, raw.key, raw.timestamp_ms, raw.headers, at))
            if out:
                break
        return out

    def end_offset(self, linearizable: bool = False) -> int:
        """Offset of the last committed record (-1 when none). With linearizable=True the
        leader first confirms with a quorum that it still leads (ReadIndex)."""
        deadline = time.monotonic() + self.timeout
        reply = self._call(EndOffsetRequest(linearizable), deadline, leader=True)
        assert isinstance(reply, EndOffsetReply)
        return reply.commit_offset

    def status(self) -> list[dict]:
        """One dict per member, as `quorumlog status --json` prints them."""
        deadline = time.monotonic() + self.timeout
        first = self._call(StatusRequest(), deadline, leader=False)
        assert isinstance(first, StatusReply)
        members = {int(k): v for k, v in first.status.get("members", {}).items()}
        out = []
        for node_id, address in sorted(members.items()):
            if node_id == first.status["node_id"]:
                out.append(first.status)
                continue
            try:
                reply = self._call_once(
                    address, StatusRequest(), min(deadline, time.monotonic() + 2)
                )
                out.append(
                    reply.status
                    if isinstance(reply, StatusReply)
                    else {"node_id": node_id, "error": "unreachable"}
                )
            except (QuorumLogError, ConnectionLost):
                out.append({"node_id": node_id, "error": "unreachable"})
        return out

    # ------------------------------------------------------------------- plumbing

    def _append_requests(self, records: list[bytes | Record], acks: Acks) -> list[AppendRequest]:
        """One request per batch, each stamped with this client's producer id and the next
        sequence, so that a retry is recognised and never written twice."""
        if not records:
            raise QuorumLogError("nothing to append")
        now_ms = int(time.time() * 1000)
        requests: list[AppendRequest] = []
        pending: list[tuple] = []
        pending_bytes = 0

        def close_batch() -> None:
            nonlocal pending, pending_bytes
            if pending:
                self._seq += 1
                batch = make_data_batch(
                    pending,
                    timestamp_ms=now_ms,
                    producer_id=self._producer_id,
                    producer_seq=self._seq,
                )
                requests.append(AppendRequest(batch, acks, self._producer_id, self._seq))
                pending, pending_bytes = [], 0

        for record in records:
            if isinstance(record, bytes | bytearray | memoryview):
                record = Record(bytes(record))
            size = len(record.value) + len(record.key or b"")
            if size > RECORD_BYTES_MAX:
                raise TooLargeError(
                    f"a record of {size} bytes exceeds the maximum of {RECORD_BYTES_MAX} bytes"
                )
            if pending_bytes + size > BATCH_BYTES_MAX:
                close_batch()
            ts = record.timestamp_ms if record.timestamp_ms is not None else now_ms
            pending.append((record.key, record.value, ts, record.headers))
            pending_bytes += size + 16
        close_batch()
        return requests

    def _call(self, message: Message, deadline: float, *, leader: bool) -> Message:
        """Send to the leader (or any broker), following hints, until the deadline."""
        with self._lock:
            attempt = 0
            tried: list[str] = []
            last_problem = "no broker answered"
            while True:
                address = self._pick(tried, leader)
                tried.append(address)
                try:
                    reply = self._call_once(address, message, deadline)
                except ConnectionLost as exc:
                    # Safe to retry: appends are idempotent, everything else only reads.
                    last_problem = str(exc)
                    self._leader = None
                except UnreachableError as exc:
                    if self.direct:
                        raise
                    last_problem = str(exc)
                    self._leader = None
                else:
                    if not isinstance(reply, ErrorReply):
                        if leader:
                            self._leader = address
                        return reply
                    retriable = reply.code in (ErrorCode.NOT_LEADER, ErrorCode.UNKNOWN)
                    if not retriable or self.direct:
                        raise _error_from(reply)
                    last_problem = reply.message
                    self._leader = reply.leader_address
                attempt += 1
                pause = min(BACKOFF_S_MAX, BACKOFF_S_MIN * 2 ** min(attempt, 10))
                pause *= self._rng.uniform(0.5, 1.5)
                if time.monotonic() + pause >= deadline:
                    raise CallTimeoutError(
                        f"gave up after {self.timeout:g} s: {last_problem}"
                    ) from None
                time.sleep(pause)

    def _pick(self, tried: list[str], leader: bool) -> str:
        if self.direct:
            return self.brokers[0]
        if leader and self._leader:
            return self._leader
        untried = [b for b in self.brokers if b not in tried]
        return untried[0] if untried else self._rng.choice(self.brokers)

    def _call_once(self, address: str, message: Message, deadline: float) -> Message:
        connection = self._connections.get(address)
        if connection is None:
            connection = SyncConnection(address, self.secret, deadline)
            self._connections[address] = connection
        try:
            return connection.request(message, deadline)
        except BaseException:
            self._connections.pop(address, None)
            connection.close()
            raise


def _error_from(reply: ErrorReply) -> QuorumLogError:
    match reply.code:
        case ErrorCode.NOT_LEADER:
            return NotLeaderError(reply.message, reply.leader_id, reply.leader_address)
        case ErrorCode.OFFSET_OUT_OF_RANGE:
            return OffsetOutOfRangeError(reply.message)
        case ErrorCode.TOO_LARGE:
            return TooLargeError(reply.message)
        case ErrorCode.TIMEOUT:
            return CallTimeoutError(reply.message)
        case ErrorCode.UNKNOWN:
            return OutcomeUnknownError(reply.message)
        case _:
            return QuorumLogError(f"{reply.code.name.lower()}: {reply.message}")
