"""`Client`: the blocking Python client, for scripts, threads and Spark workers.

It is an `AsyncClient` (quorumlog/client/aclient.py) served on a trio loop in a thread of its own
(quorumlog/client/loop_thread.py): every method hands its call to that loop and waits. So the two
clients keep one set of rules (routing, retries, the leader watch, idempotent appends),
and calls from many threads are in flight together on one connection per broker, appends
to the same partition riding together, instead of taking turns. Every call ends, answered
or with a definite QuorumLogError, within the client's timeout. Open at construction;
`close()` (or leaving `with`) stops the thread.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence

from quorumlog.client.aclient import AsyncClient
from quorumlog.client.loop_thread import LoopThread
from quorumlog.client.protocol import DEFAULT_TOPIC, AppendResult, Record, record_list


class Client:
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
        self._client = AsyncClient(
            brokers, secret, timeout, direct, producer_id, tls_ca, tls_cert, tls_key
        )
        self._loop = LoopThread(self._client, "client")
        self._loop.start()
        # A client dropped without close() still stops its thread and connections (not at
        # interpreter exit: the thread is a daemon).
        weakref.finalize(self, self._loop.stop).atexit = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._loop.close()

    @property
    def brokers(self) -> list[str]:
        return self._client.brokers

    @property
    def secret(self) -> bytes | None:
        return self._client.secret

    @property
    def timeout(self) -> float:
        return self._client.timeout

    @property
    def attempt_s(self) -> float:
        """How long one try at one node may take (quorumlog/client/protocol.py, ClientBase)."""
        return self._client.attempt_s

    @attempt_s.setter
    def attempt_s(self, value: float) -> None:
        self._client.attempt_s = value

    def append(
        self,
        records: Iterable[bytes | Record],
        acks: str = "quorum",
        details: bool = False,
        topic: str = DEFAULT_TOPIC,
        partition: int | None = None,
    ) -> int | AppendResult | None:
        """Append records, as one batch, to one partition of `topic`: `partition`, or
        (None) the first record's key's, or unkeyed, the next partition in turn: round
        robin per call, each call one partition (`append_spread` spreads the records of
        one call). Returns the offset of the first (None with acks="none"; an
        `AppendResult` with details). `acks`: "quorum" (or Kafka's "all"), "leader", "none"."""
        return self._loop.run_together(
            self._client._append_each, (acks, topic, partition), (record_list(records), details)
        )

    def append_spread(
        self, records: Iterable[bytes | Record], acks: str = "quorum", topic: str = DEFAULT_TOPIC
    ) -> list[AppendResult] | None:
        """Append `records` spread over the partitions of `topic` record by record: keyed
        ones by their key, unkeyed ones round robin (see `AsyncClient.append_spread`).
        Returns an `AppendResult` per partition written (None with acks="none")."""
        return self._loop.run(self._client.append_spread, record_list(records), acks, topic)

    def read(
        self,
        offset: int,
        max_records: int = 1000,
        topic: str = DEFAULT_TOPIC,
        partition: int = 0,
    ) -> list[Record]:
        """Committed records from `offset` on; [] at or past the committed end."""
        return self._loop.run(self._client.read, offset, max_records, topic, partition)

    def end_offset(
        self, linearizable: bool = False, topic: str = DEFAULT_TOPIC, partition: int = 0
    ) -> int:
        """Offset of the last committed record (-1 when none). With linearizable=True the
        leader first confirms with a quorum that it still leads (ReadIndex)."""
        return self._loop.run(self._client.end_offset, linearizable, topic, partition)

    def start_offset(self, topic: str = DEFAULT_TOPIC, partition: int = 0) -> int:
        """Offset of the first retained record (the log start)."""
        return self._loop.run(self._client.start_offset, topic, partition)

    def offset_for_time(
        self, timestamp_ms: int, topic: str = DEFAULT_TOPIC, partition: int = 0
    ) -> int | None:
        """The first committed offset whose record is stamped at or after `timestamp_ms`
        (milliseconds since the epoch); None when none is, yet."""
        return self._loop.run(self._client.offset_for_time, timestamp_ms, topic, partition)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replicas: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        timestamps: str = "create",
        config: Mapping[str, object] | None = None,
    ) -> None:
        """Create a topic; returns once every partition has a leader. `replicas`: 3, or
        every node of a smaller cluster. `timestamps`: "create" (the producer's clock) or
        "log_append" (the leader's, never going back in offset order). `config`: settings
        by Kafka's names, as `alter_topic` takes them (`{"cleanup.policy": "compact"}`)."""
        self._loop.run(
            self._client.create_topic,
            name,
            partitions,
            replicas,
            retention_bytes,
            retention_ms,
            timestamps,
            config,
        )

    def topics(self, details: bool = False) -> dict[str, int] | dict[str, tuple[int, int]]:
        """Every topic with its partition count (details: and its replication factor)."""
        return self._loop.run(self._client.topics, details)

    def describe_topic(self, name: str) -> list[dict]:
        """One dict per partition, as `quorumlog topic describe --json` prints them."""
        return self._loop.run(self._client.describe_topic, name)

    def delete_topic(self, name: str) -> None:
        self._loop.run(self._client.delete_topic, name)

    def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        replicas: int | None = None,
        config: Mapping[str, object] | None = None,
        replace_config: bool = False,
    ) -> dict:
        """As `AsyncClient.alter_topic`: settings, then more partitions, then the
        replication factor; returns once committed, replicas moving in the background."""
        return self._loop.run(
            self._client.alter_topic,
            name,
            partitions=partitions,
            replicas=replicas,
            config=config,
            replace_config=replace_config,
        )

    def move_partition(self, topic: str, partition: int, to: Iterable[int]) -> None:
        """Give a partition exactly the replicas `to`, its preferred leader first."""
        self._loop.run(self._client.move_partition, topic, partition, list(to))

    def trim_topic(self, name: str, partition: int, before: int) -> int:
        """Readers of the partition start at `before` (-1: its committed end) from now on;
        returns the log start after."""
        return self._loop.run(self._client.trim_topic, name, partition, before)

    def partition_moves(self) -> list[dict]:
        """The partitions whose replicas are still moving (see `AsyncClient`)."""
        return self._loop.run(self._client.partition_moves)

    def rebalance(self, start: bool = True) -> dict:
        """Spread replicas, then leaders, over every node (see `AsyncClient.rebalance`)."""
        return self._loop.run(self._client.rebalance, start)

    def groups(self) -> list[dict]:
        """Every consumer group: [{"group", "mode", "members"}, ...]."""
        return self._loop.run(self._client.groups)

    def describe_group(self, name: str) -> dict:
        return self._loop.run(self._client.describe_group, name)

    def reset_offsets(
        self, name: str, topic: str, to: str | int | None = None, *, to_time_ms: int | None = None
    ) -> list[tuple]:
        """Set the group's positions in every partition of `topic` to "earliest", "latest"
        or an offset, or (`to_time_ms`) each partition's first record stamped at or after
        that time, its end where none is; refused while the group has members."""
        return self._loop.run(self._client.reset_offsets, name, topic, to, to_time_ms=to_time_ms)

    def delete_group(self, name: str) -> None:
        """Delete a consumer group and its positions; refused while it has members."""
        self._loop.run(self._client.delete_group, name)

    def group_call(self, op: str, group: str, **args) -> dict:
        """One call to a consumer group's coordinator (quorumlog/client/consumer.py)."""
        return self._loop.run(self._client.group_call, op, group, **args)

    def admin(self, op: str, **args) -> dict:
        """A membership change or a leadership transfer; returns when it is done (committed),
        retrying while another change or a transfer is under way, until the timeout."""
        return self._loop.run(self._client.admin, op, **args)

    def status(self) -> list[dict]:
        """One dict per member, as `quorumlog status --json` prints them. The members are
        asked together, so silent ones cost one wait."""
        return self._loop.run(self._client.status)
