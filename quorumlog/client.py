"""`Client`: the blocking Python client (plain sockets, thread-safe, no event loop).

Usable from scripts and Spark workers. Every call ends, answered or with a definite
QuorumLogError, within the client's timeout. Routing and batching: quorumlog/protocol.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

from quorumlog.connection import ConnectionLost, SyncConnection
from quorumlog.errors import (
    CallTimeoutError,
    OffsetOutOfRangeError,
    QuorumLogError,
    UnknownTopicError,
    UnreachableError,
)
from quorumlog.leader_watch import ASK_TIMEOUT_S, LeaderReplaced, Terms
from quorumlog.protocol import (
    DEFAULT_TOPIC,
    READ_BYTES_MAX,
    STATUS_TIMEOUT_S,
    WATCHED,
    AppendResult,
    ClientBase,
    Record,
    append_result,
    members_of,
    parse_acks,
    records_from,
    route_of,
    status_rows,
    topic_request,
    topics_of,
)
from quorumlog.transport.messages import (
    AdminReply,
    AdminRequest,
    AppendReply,
    EndOffsetReply,
    EndOffsetRequest,
    ErrorCode,
    ErrorReply,
    GroupRequest,
    LeaderRequest,
    Message,
    ReadReply,
    ReadRequest,
    StatusReply,
    StatusRequest,
)


class Client(ClientBase):
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
        super().__init__(brokers, secret, timeout, direct, producer_id, tls_ca, tls_cert, tls_key)
        self._lock = threading.Lock()
        self._connections: dict[str, SyncConnection] = {}
        self._terms = Terms()  # for the leader watch (quorumlog/leader_watch.py)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()

    def append(
        self,
        records: Iterable[bytes | Record],
        acks: str = "quorum",
        details: bool = False,
        topic: str = DEFAULT_TOPIC,
        partition: int | None = None,
    ) -> int | AppendResult | None:
        """Append records, as one batch, to one partition of `topic` (None: by the first
        record's key, round robin if unkeyed); returns the offset of the first (None with
        acks="none")."""
        records = list(records)
        deadline = time.monotonic() + self.timeout
        if partition is None:
            count = self._partition_count(topic)
            with self._lock:
                partition = self._partition_for(topic, records, count)
        with self._lock:
            requests = self._producer.requests(records, parse_acks(acks), topic, partition)
        replies = [self._call(r, deadline, to_leader=True) for r in requests]
        assert all(isinstance(r, AppendReply) for r in replies)
        return append_result(replies, details, topic, partition)

    def read(
        self,
        offset: int,
        max_records: int = 1000,
        topic: str = DEFAULT_TOPIC,
        partition: int = 0,
    ) -> list[Record]:
        """Committed records from `offset` on; [] at or past the committed end."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset} is negative")
        deadline = time.monotonic() + self.timeout
        position = offset
        while True:
            request = ReadRequest(position, READ_BYTES_MAX, topic, partition, self._leader_only)
            reply = self._call(request, deadline, to_leader=True)
            assert isinstance(reply, ReadReply)
            if not reply.batches:
                return []
            records, position = records_from(reply, offset, max_records, topic, partition)
            if records:
                return records

    def end_offset(
        self, linearizable: bool = False, topic: str = DEFAULT_TOPIC, partition: int = 0
    ) -> int:
        """Offset of the last committed record (-1 when none). With linearizable=True the
        leader first confirms with a quorum that it still leads (ReadIndex)."""
        return self._end_offsets(linearizable, topic, partition).commit_offset

    def start_offset(self, topic: str = DEFAULT_TOPIC, partition: int = 0) -> int:
        """Offset of the first retained record (the log start)."""
        return self._end_offsets(False, topic, partition).log_start_offset

    def _end_offsets(self, linearizable: bool, topic: str, partition: int) -> EndOffsetReply:
        deadline = time.monotonic() + self.timeout
        request = EndOffsetRequest(linearizable, topic, partition, self._leader_only)
        reply = self._call(request, deadline, to_leader=True)
        assert isinstance(reply, EndOffsetReply)
        return reply

    # ------------------------------------------------------------------- topics

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replicas: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        timestamps: str = "create",
    ) -> None:
        """Create a topic; returns once every partition has a leader. `replicas`: 3, or
        every node of a smaller cluster. `timestamps`: "create" (the producer's clock) or
        "log_append" (the leader's, never going back in offset order)."""
        self._topic_call(
            "create_topic",
            name=name,
            partitions=partitions,
            replicas=replicas,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
            timestamp_type=timestamps,
        )
        with self._lock:
            self._partition_counts[name] = partitions

    def topics(self, details: bool = False) -> dict[str, int] | dict[str, tuple[int, int]]:
        """Every topic with its partition count (details: and its replication factor)."""
        reply = self._topic_call("list_topics")
        counts = topics_of(reply)
        with self._lock:
            self._partition_counts.update(counts)
        if details:
            return {name: tuple(row) for name, row in reply.result["topics"].items()}
        return counts

    def describe_topic(self, name: str) -> list[dict]:
        """One dict per partition, as `quorumlog topic describe --json` prints them."""
        return self._topic_call("describe_topic", name=name).result["partitions"]

    def delete_topic(self, name: str) -> None:
        self._topic_call("delete_topic", name=name)
        with self._lock:
            self._partition_counts.pop(name, None)

    def _topic_call(self, op: str, **args) -> AdminReply:
        deadline = time.monotonic() + self.timeout
        request = topic_request(op, self.timeout, **args)
        reply = self._call(request, deadline, to_leader=True, bounded=False, as_retry=_retry)
        assert isinstance(reply, AdminReply)
        return reply

    def _partition_count(self, topic: str) -> int:
        with self._lock:
            count = self._partition_counts.get(topic)
        if count is None:
            self.topics()
            with self._lock:
                count = self._partition_counts.get(topic)
            if count is None:
                raise UnknownTopicError(f"unknown topic {topic!r}")
        return count

    # ------------------------------------------------------------------- consumer groups

    def groups(self) -> list[dict]:
        """Every consumer group: [{"group", "mode", "members"}, ...]."""
        return self.group_call("list", "")["groups"]

    def describe_group(self, name: str) -> dict:
        return self.group_call("describe", name)

    def reset_offsets(self, name: str, topic: str, to: str | int) -> list[tuple]:
        """Set the group's positions in every partition of `topic` to "earliest", "latest"
        or an offset; refused while the group has members."""
        reply = self.group_call("reset_offsets", name, topic=topic, to=to)
        return [tuple(o) for o in reply["offsets"]]

    def group_call(self, op: str, group: str, **args) -> dict:
        """One call to a consumer group's coordinator (quorumlog/consumer.py)."""
        deadline = time.monotonic() + self.timeout
        reply = self._call(GroupRequest(op, group, args), deadline, to_leader=True)
        assert isinstance(reply, AdminReply)
        return reply.result

    def admin(self, op: str, **args) -> dict:
        """A membership change or a leadership transfer; returns when it is done (committed),
        retrying while another change or a transfer is under way, until the timeout."""
        deadline = time.monotonic() + self.timeout
        request = AdminRequest(op, {**args, "timeout_s": self.timeout})
        # A membership change may take long (a learner catching up): no per-try cap.
        reply = self._call(request, deadline, to_leader=True, bounded=False, as_retry=_retry)
        assert isinstance(reply, AdminReply)
        return reply.result

    def status(self) -> list[dict]:
        """One dict per member, as `quorumlog status --json` prints them. The members are
        asked together, each on a connection of its own, so silent ones cost one wait."""
        deadline = time.monotonic() + self.timeout
        first = self._call(StatusRequest(), deadline, to_leader=False)
        assert isinstance(first, StatusReply)
        others = members_of(first.status)
        others.pop(first.status["node_id"], None)
        answers: dict[int, dict] = {}
        until = min(deadline, time.monotonic() + STATUS_TIMEOUT_S)

        def ask(node_id: int, address: str) -> None:
            try:
                connection = SyncConnection(address, self.secret, until, self._ssl_context)
            except (QuorumLogError, ConnectionLost):
                return
            try:
                reply = connection.request(StatusRequest(), until)
                if isinstance(reply, StatusReply):
                    answers[node_id] = reply.status
            except (QuorumLogError, ConnectionLost):
                pass
            finally:
                connection.close()

        threads = [
            threading.Thread(target=ask, args=member, daemon=True) for member in others.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, until - time.monotonic()) + 1.0)
        return status_rows(first.status, dict(answers))

    def _call(
        self,
        message: Message,
        deadline: float,
        *,
        to_leader: bool,
        bounded: bool = True,
        as_retry: Callable[[Message], Message] | None = None,
    ) -> Message:
        """`as_retry`: the message to send after a try whose outcome is unknown."""
        route = route_of(message)
        attempts = self._router.call(route)
        watched = to_leader and not self._router.direct and isinstance(message, WATCHED)
        problem = "no broker answered"
        while True:
            with self._lock:
                address = attempts.pick(to_leader)
                # A node that went silent (paused, cut off) must not hold the whole call.
                attempt_end = (
                    min(deadline, time.monotonic() + self.attempt_s) if bounded else deadline
                )
                still_waiting = (
                    (lambda a=address: self._check_leader(route, a)) if watched else None
                )
                try:
                    reply = self._call_once(address, message, attempt_end, still_waiting)
                except LeaderReplaced as replaced:
                    attempts.on_replaced(address, replaced.leader)
                    problem = f"{address} was replaced by {replaced.leader}"
                except (ConnectionLost, UnreachableError) as exc:
                    attempts.on_unreachable(address, exc)
                    problem = str(exc)
                    if isinstance(exc, ConnectionLost) and as_retry is not None:
                        message = as_retry(message)
                except CallTimeoutError as exc:
                    if time.monotonic() >= deadline:
                        raise CallTimeoutError(f"gave up after {self.timeout:g} s: {exc}") from None
                    attempts.on_unreachable(address, exc)
                    problem = f"{address} did not answer in time"
                    if as_retry is not None:
                        message = as_retry(message)
                else:
                    unknown = isinstance(reply, ErrorReply) and reply.code is ErrorCode.UNKNOWN
                    if unknown and as_retry is not None:
                        message = as_retry(message)
                    # Outside the try: an error the reply carries (a transfer that timed
                    # out, say) is the answer, not a broker that failed to answer.
                    if attempts.on_reply(address, reply):
                        return reply
                    problem = reply.message
            pause = attempts.pause_s()
            if time.monotonic() + pause >= deadline:
                raise CallTimeoutError(f"gave up after {self.timeout:g} s: {problem}")
            time.sleep(pause)

    def _call_once(
        self,
        address: str,
        message: Message,
        deadline: float,
        still_waiting: Callable[[], None] | None = None,
    ) -> Message:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = SyncConnection(
                address, self.secret, deadline, self._ssl_context
            )
        try:
            return connection.request(message, deadline, still_waiting)
        except BaseException:
            self._connections.pop(address, None)
            connection.close()
            raise

    def _check_leader(self, route: tuple[str, int], address: str) -> None:
        """While waiting on `address`: raise LeaderReplaced if the other brokers elected
        another leader of `route` (quorumlog/leader_watch.py)."""
        replies = []
        for broker in self.brokers:
            if broker != address:
                try:
                    ask_end = time.monotonic() + ASK_TIMEOUT_S
                    replies.append(self._call_once(broker, LeaderRequest(*route), ask_end))
                except (QuorumLogError, ConnectionLost):
                    continue
        leader = self._terms.newer_leader(route, address, replies)
        if leader is not None:
            raise LeaderReplaced(leader)


def _retry(request: Message) -> Message:
    """An admin call sent again after a try whose outcome is unknown (actors/admin.py)."""
    assert isinstance(request, AdminRequest)
    return AdminRequest(request.op, {**request.args, "retry": True})
