"""What both clients share: records, append batching, reply decoding, broker routing.

Pure code, no I/O: `Client` (sockets) and `AsyncClient` (trio) only send and wait.
Routing follows KUDU-1353's lesson: what a node says about the leader is a hint. On
not_leader, a lost connection or an unreachable broker, try the hinted leader or the next
broker, with jittered backoff, until the deadline; then fail definitely.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from quorumlog.client.errors import (
    QuorumLogError,
    TooLargeError,
)
from quorumlog.client.partitioner import partition_of_key, spread
from quorumlog.client.routing import Router
from quorumlog.log.batch import BatchError, BatchType, parse_batch, split_batches
from quorumlog.log.records import make_data_batch, offset_records
from quorumlog.transport.addresses import parse_address
from quorumlog.transport.messages import (
    Acks,
    AdminReply,
    AdminRequest,
    AppendReply,
    AppendRequest,
    EndOffsetRequest,
    Message,
    ReadReply,
)
from quorumlog.transport.tls import TlsSetupError, client_context

DEFAULT_TOPIC = "default"
# "all" is Kafka's name for quorum (the CLI's --acks takes it too).
ACKS = {"quorum": Acks.QUORUM, "all": Acks.QUORUM, "leader": Acks.LEADER, "none": Acks.NONE}
BATCH_BYTES_MAX = 1024 * 1024  # records per batch, before compression
RECORD_BYTES_MAX = 4 * 1024 * 1024
READ_BYTES_MAX = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Record:
    value: bytes | None  # None: no value, a tombstone (on a compacted topic, the key's end)
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: list[tuple[str, bytes]] | None = None
    offset: int | None = None
    topic: str | None = None  # set on records read back, as are offset and partition
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed and the durability the leader saw when it answered."""

    first_offset: int
    last_offset: int
    commit_offset: int
    majority_flushed_offset: int
    majority_dirty_offset: int
    topic: str = DEFAULT_TOPIC
    partition: int = 0


# One try at one broker; then the next (idempotent appends make that safe). A node that
# went silent (paused, cut off) must not hold a whole call.
ATTEMPT_S = 2.0
STATUS_TIMEOUT_S = 2.0  # the longest `status` waits for the members (asked together)
# How much sooner than the client the leader gives up a membership change: its answer
# says why (which step, which node it cannot reach), a client's own timeout cannot.
ADMIN_ANSWER_MARGIN_S = 0.5


def read_secret_file(path: str) -> bytes:
    """The cluster secret in a file (surrounding whitespace dropped); ValueError if the file
    cannot be read or holds nothing."""
    try:
        with open(path, "rb") as f:
            secret = f.read().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the secret file {path}: {exc}") from None
    if not secret:
        raise ValueError(f"the secret file {path} is empty")
    return secret


BROKERS_WANTED = "a 'HOST:PORT,HOST:PORT' str or a list of 'HOST:PORT' strs"


def parse_brokers(brokers: str | Iterable[str]) -> list[str]:
    """The brokers as a list of "HOST:PORT", checked once, before any dial: a TypeError
    (not text) or a ValueError (text, but not HOST:PORT) that shows what was given."""
    if isinstance(brokers, str):
        items = brokers.split(",")
    elif isinstance(brokers, bytes | bytearray | memoryview) or not isinstance(brokers, Iterable):
        raise TypeError(f"brokers is {BROKERS_WANTED}, not {_shown(brokers)}")
    else:
        items = list(brokers)
        for item in items:
            if not isinstance(item, str):
                raise TypeError(
                    f"brokers is {BROKERS_WANTED}, not {_shown(items)} "
                    f"({item!r:.40} is {type(item).__name__})"
                )
    out = [b.strip() for b in items if b.strip()]
    if not out:
        raise ValueError(f"no brokers given ({brokers!r:.80}): {BROKERS_WANTED} is needed")
    for broker in out:
        try:
            parse_address(broker)
        except ValueError:
            example = f"{broker}:7001" if ":" not in broker else "127.0.0.1:7001"
            raise ValueError(
                f"broker {broker!r:.80} is not HOST:PORT (such as {example!r}); "
                f"brokers is {BROKERS_WANTED}"
            ) from None
    return out


def _shown(value: object) -> str:
    return f"{value!r:.80} ({type(value).__name__})"


def parse_acks(acks: str) -> Acks:
    if acks not in ACKS:
        raise QuorumLogError(f"acks must be one of {', '.join(ACKS)}, not {acks!r}")
    return ACKS[acks]


PRODUCER_ID_MAX = 2**62 - 1


class Producer:
    """An idempotent producer: an id (random unless given), and a sequence number per append
    request, from 0."""

    def __init__(self, rng: random.Random, producer_id: int | None = None):
        if producer_id is not None and not 0 <= producer_id <= PRODUCER_ID_MAX:
            raise QuorumLogError(f"a producer id is in [0, 2**62), not {producer_id}")
        self.producer_id = rng.getrandbits(62) if producer_id is None else producer_id
        self._seq = -1

    def requests(
        self,
        records: Sequence[bytes | Record],
        acks: Acks,
        topic: str = DEFAULT_TOPIC,
        partition: int = 0,
    ) -> list[AppendRequest]:
        """One request per batch (so that an append is atomic in the log), each stamped
        with the next sequence: a retry is recognised and never written twice."""
        return [self.request(chunk, acks, topic, partition) for chunk in split(prepare(records))]

    def request(
        self, records: Sequence[Prepared], acks: Acks, topic: str, partition: int
    ) -> AppendRequest:
        """One request carrying `records` as one batch, with the next sequence."""
        self._seq += 1
        batch = make_data_batch(
            [r.fields for r in records],
            producer_id=self.producer_id,
            producer_seq=self._seq,
        )
        return AppendRequest(batch, acks, self.producer_id, self._seq, topic, partition)


class Prepared(NamedTuple):
    """A record checked and stamped, ready for a batch: (key, value, timestamp, headers),
    and its size as a batch counts it."""

    fields: tuple
    size: int


def _check_types(record: Record) -> None:
    """At the call, not in the log: a str stored as a value once poisoned its partition for
    every reader (bytes is what the log and Kafka clients carry). Not in Record itself:
    records read back are built by the thousand from what the log holds."""
    if not isinstance(record.value, bytes) and record.value is not None:
        raise TypeError(f"Record value must be bytes or None, not {type(record.value).__name__}")
    if not isinstance(record.key, bytes) and record.key is not None:
        raise TypeError(f"Record key must be bytes or None, not {type(record.key).__name__}")
    for header in record.headers or ():
        if (
            not isinstance(header, tuple | list)
            or len(header) != 2
            or not isinstance(header[0], str)
            or not isinstance(header[1], bytes)
        ):
            raise TypeError(f"Record headers are (str, bytes) pairs, not {header!r:.60}")


def record_list(records: Iterable[bytes | Record]) -> list[bytes | Record]:
    """An append call's records as a list; a TypeError at the call for anything that is
    not a collection of them (bytes alone would be taken for a list of ints)."""
    if records is None or isinstance(records, bytes | bytearray | memoryview | str | Record):
        raise TypeError(f"records must be a list of bytes or Records, not {type(records).__name__}")
    return list(records)


def prepare(records: Sequence[bytes | Record]) -> list[Prepared]:
    """Records checked (not empty, none too large) and stamped with the time now unless
    they carry their own."""
    if not records:
        raise QuorumLogError("nothing to append")
    now_ms = int(time.time() * 1000)
    out = []
    for record in records:
        if type(record) is bytes:  # the common case, without a Record in between
            size = len(record)
            fields: tuple = (None, record, now_ms, None)
        else:
            if isinstance(record, bytes | bytearray | memoryview):  # a bytes subclass too
                record = Record(bytes(record))
            elif not isinstance(record, Record):
                raise TypeError(f"a record is bytes or a Record, not {type(record).__name__}")
            else:
                _check_types(record)
            size = len(record.value or b"") + len(record.key or b"")
            ts = record.timestamp_ms if record.timestamp_ms is not None else now_ms
            fields = (record.key, record.value, ts, record.headers)
        if size > RECORD_BYTES_MAX:
            raise TooLargeError(
                f"a record of {size} bytes exceeds the maximum of {RECORD_BYTES_MAX} bytes"
            )
        out.append(Prepared(fields, size + 16))
    return out


def split(records: list[Prepared]) -> list[list[Prepared]]:
    """`records` in batches of at most BATCH_BYTES_MAX (a record larger than that alone)."""
    sizes = [r.size for r in records]
    if sum(sizes) <= BATCH_BYTES_MAX:
        return [records]
    return batches_of(records, sizes)


T = TypeVar("T")


def batches_of(items: list[T], sizes: list[int]) -> list[list[T]]:
    """`items` in order, in runs of at most BATCH_BYTES_MAX by `sizes` (an item larger than
    that alone)."""
    chunks: list[list[T]] = [[]]
    total = 0
    for item, size in zip(items, sizes, strict=True):
        if chunks[-1] and total + size > BATCH_BYTES_MAX:
            chunks.append([])
            total = 0
        chunks[-1].append(item)
        total += size
    return chunks


def append_result(
    replies: list[AppendReply], details: bool, topic: str = DEFAULT_TOPIC, partition: int = 0
) -> int | AppendResult | None:
    first, last = replies[0], replies[-1]
    if first.first_offset is None:
        return None
    if not details:
        return first.first_offset
    return AppendResult(
        first.first_offset,
        last.last_offset,
        last.commit_offset,
        last.majority_flushed_offset,
        last.majority_dirty_offset,
        topic,
        partition,
    )


def records_from(
    reply: ReadReply,
    offset: int,
    max_records: int,
    topic: str = DEFAULT_TOPIC,
    partition: int = 0,
) -> tuple[list[Record], int]:
    """Data records at or after `offset` in a read reply, and the offset to read next."""
    records, next_offset, _ = decode_batches(reply.batches, offset, max_records, topic, partition)
    return records[:max_records], next_offset


def decode_batches(
    batches: bytes | memoryview, offset: int, max_records: int, topic: str, partition: int
) -> tuple[list[Record], int, memoryview]:
    """The data records at or after `offset`, at least `max_records` of them when there are
    (the whole batch the last one needed is in: a reader reading on takes the others from
    it), the offset to read next, and the batches after those decoded. Batches after the
    last one needed are not even checked: a reader asking for little reads little."""
    view = memoryview(batches)
    out: list[Record] = []
    next_offset = offset
    pos = 0
    try:
        while pos < len(view) and len(out) < max_records:
            header = parse_batch(view, pos)
            end = pos + header.total_bytes
            next_offset = header.last_offset + 1
            if header.batch_type is BatchType.DATA and header.last_offset >= offset:
                for at, raw in offset_records(view[pos:end], header):
                    if at >= offset:
                        out.append(
                            Record(
                                raw.value,
                                raw.key,
                                raw.timestamp_ms,
                                raw.headers,
                                at,
                                topic,
                                partition,
                            )
                        )
            pos = end
    except BatchError as exc:
        raise QuorumLogError(f"damaged data from the cluster: {exc}") from None
    return out, next_offset, view[pos:]


def records_at(
    batches: list[bytes], offsets: list[int], topic: str, partition: int
) -> list[Record]:
    """The records at `offsets` in whole data batches (a queue-mode lease), in order."""
    wanted = set(offsets)
    out: list[Record] = []
    for blob in batches:
        for header, batch in split_batches(blob):
            for at, raw in offset_records(batch, header):
                if at in wanted:
                    out.append(
                        Record(
                            raw.value, raw.key, raw.timestamp_ms, raw.headers, at, topic, partition
                        )
                    )
    return sorted(out, key=lambda r: r.offset)


def members_of(status: dict) -> dict[int, str]:
    """node id -> address of every member, from one node's status: the cluster's
    configuration as that node knows it (its controller's), else (a node of an older
    version) the configuration of its replica of `default`."""
    members = status.get("cluster_members") or status.get("members", {})
    return {int(k): v for k, v in members.items()}


def status_order(status: dict) -> tuple:
    """How current one node's view of the cluster is: a node that knows itself removed
    last, then by where the cluster's configuration it knows sits in the controller's
    log (the same order on every node), then the controller's leader, then a leader."""
    return (
        not status.get("removed", False),
        status.get("cluster_config_offset", -1),
        status.get("controller_id") == status.get("node_id"),
        status.get("role") == "leader",
        status.get("term", -1),
    )


def newest_status(statuses: Iterable[dict]) -> dict:
    """The answer whose view of the cluster is the newest (`status_order`)."""
    return max(statuses, key=status_order)


def status_rows(newest: dict, answers: dict[int, dict]) -> list[dict]:
    """`status`: one row per member in id order, the members as the `newest` answer names
    them (`newest_status`), each from `answers` (node id -> status), unreachable if it
    did not answer in time. Nodes that answered and are not members are listed too: a
    node that was a member (it knows a cluster configuration) as `removed`, whatever
    its own old configuration says; a node that never was, as it answered (it is
    joining)."""
    answers = {newest["node_id"]: newest, **answers}
    members = members_of(newest)
    rows = {i: answers.get(i, {"node_id": i, "error": "unreachable"}) for i in members}
    for node_id, status in answers.items():
        if node_id in rows:
            continue
        was_member = status.get("cluster_config_offset", 0 if status.get("config") else -1) >= 0
        rows[node_id] = {**status, "role": "removed", "removed": True} if was_member else status
    return [rows[i] for i in sorted(rows)]


class ClientBase:
    """What both clients hold: brokers, secret, timeout, routing, the idempotent producer.

    `attempt_s` bounds one try of a call at one node: a node that went silent (paused, cut
    off) is left for another after that long, if the leader watch did not move the call
    sooner (quorumlog/client/leader_watch.py). Calls that may take long (membership changes) are
    not bounded by it.

    `producer_id` fixes the producer's id instead of drawing one at random: a writer that
    may run again elsewhere (a retried Spark task) and appends the same records in the same
    order gets its first run's offsets back instead of writing twice. Two writers must
    never share an id.
    """

    def __init__(
        self,
        brokers: str | Sequence[str],
        secret: bytes | str | None = None,
        timeout: float = 10.0,
        direct: bool = False,
        producer_id: int | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ):
        self.brokers = parse_brokers(brokers)
        if tls_cert is not None and tls_ca is None:
            raise TlsSetupError("a TLS client certificate needs tls_ca, the CA to check nodes")
        # TLS with the nodes (transport/tls.py): they require a certificate the CA signed.
        self._ssl_context = client_context(tls_ca, tls_cert, tls_key) if tls_ca else None
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.timeout = timeout
        self.attempt_s = ATTEMPT_S
        rng = random.Random()
        self._router = Router(self.brokers, direct, rng)
        # Reads and end offsets come from the partition's leader, unless the client talks
        # to one node only (direct): then that node answers with what it knows.
        self._leader_only = not direct
        self._producer = Producer(rng, producer_id)
        self._partition_counts: dict[str, int] = {DEFAULT_TOPIC: 1}
        self._next_unkeyed: dict[str, int] = {}

    def _partition_for(self, topic: str, records: Sequence[bytes | Record], count: int) -> int:
        """Kafka's default partitioner for a call: the first record's key, round robin (per
        call) if unkeyed."""
        first = records[0] if records else None
        key = first.key if isinstance(first, Record) else None
        if key is not None:
            return partition_of_key(key, count)
        turn = self._next_unkeyed.get(topic, self._router.rng.randrange(count))
        self._next_unkeyed[topic] = turn + 1
        return turn % count

    def _partitions_of(
        self, topic: str, records: Sequence[bytes | Record], count: int
    ) -> list[int]:
        """Each record's partition (`append_spread`): its own key's, round robin per record
        if unkeyed, taking turns with the unkeyed calls of `_partition_for`."""
        keys = [r.key if isinstance(r, Record) else None for r in records]
        turn = self._next_unkeyed.get(topic, self._router.rng.randrange(count))
        out, self._next_unkeyed[topic] = spread(keys, count, turn)
        return out


# Calls whose partition leader the client watches while it waits (quorumlog/client/leader_watch.py).
WATCHED = (AppendRequest, EndOffsetRequest)


def topic_request(op: str, timeout_s: float, **args) -> AdminRequest:
    return AdminRequest(op, {**args, "timeout_s": timeout_s})


def admin_retry(request: Message) -> Message:
    """An admin call sent again after a try whose outcome is unknown (actors/cluster/admin_calls.py)."""
    assert isinstance(request, AdminRequest)
    return AdminRequest(request.op, {**request.args, "retry": True})


def topics_of(reply: AdminReply) -> dict[str, int]:
    return {name: partitions for name, (partitions, _) in reply.result["topics"].items()}
