"""The data source's options: Spark's strings parsed and checked into plain, picklable
settings, and the clients they make."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError
from quorumlog.client.protocol import DEFAULT_TOPIC, read_secret_file

RECORDS_PER_PARTITION = 50_000
REPLICA_TIMEOUT_S_MAX = 5.0  # one replica's turn at a call; then the next one
KAFKA_NAMES = {  # options of Spark's Kafka source that users carry over
    "startingoffsets": "startingOffset",
    "endingoffsets": "endingOffset",
    "maxoffsetspertrigger": "maxRecordsPerTrigger",
    "kafka.bootstrap.servers": "brokers",
}
OFFSET_CODES = {-2: "earliest", -1: "latest"}  # in a JSON map of offsets, as Kafka's


class DataLossError(QuorumLogError):
    """Records were removed by retention before they were read."""


@dataclass(frozen=True)
class Options:
    """Plain, picklable settings (readers and writers are pickled to the workers)."""

    brokers: tuple[str, ...]
    secret: bytes | None = None
    timeout_s: float = 30.0
    # None: no `topic` option, the default topic's one log as before (no partition column,
    # stream offsets {"offset": N}).
    topic: str | None = None
    # earliest | latest | N for every partition, or a map from partition to one of them (a
    # partition left out: the default).
    starting: str | int | dict[int, str | int] = "earliest"
    ending: str | int | dict[int, str | int] = "latest"  # latest | N, or a map
    max_records_per_trigger: int | None = None
    records_per_partition: int = RECORDS_PER_PARTITION
    fail_on_data_loss: bool = True
    # PEM files for TLS (transport/tls.py), at the same paths on the driver and every worker.
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @classmethod
    def parse(cls, options) -> Options:
        """Spark's options (a case-insensitive dict of strings), checked: a bad one raises
        ValueError naming the option and what it takes."""
        for name, ours in KAFKA_NAMES.items():
            if name in {k.lower() for k in options}:
                raise ValueError(f"quorumlog has no option {name!r}: use {ours!r}")
        return cls(
            brokers=_brokers(options.get("brokers")),
            secret=_secret(options.get("secretFile")),
            timeout_s=_number(options, "timeout", 30.0, float),
            topic=_topic(options.get("topic")),
            starting=_offset(options, "startingOffset", "earliest", ("earliest", "latest")),
            ending=_offset(options, "endingOffset", "latest", ("latest",)),
            max_records_per_trigger=_number(options, "maxRecordsPerTrigger", None, int),
            records_per_partition=_number(
                options, "recordsPerPartition", RECORDS_PER_PARTITION, int
            ),
            fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
            tls_ca=options.get("tlsCa"),
            tls_cert=options.get("tlsCert"),
            tls_key=options.get("tlsKey"),
        )

    @property
    def tls(self) -> dict[str, str | None]:
        return {"tls_ca": self.tls_ca, "tls_cert": self.tls_cert, "tls_key": self.tls_key}

    @property
    def topic_name(self) -> str:
        return self.topic or DEFAULT_TOPIC

    def starting_at(self, partition: int) -> str | int:
        return _at(self.starting, partition, "earliest")

    def ending_at(self, partition: int) -> str | int:
        return _at(self.ending, partition, "latest")

    def log_name(self, partition: int) -> str:
        """How messages name one partition's log."""
        return "the log" if self.topic is None else f"{self.topic}/{partition}"

    def check_partitions(self, count: int) -> None:
        """Offsets given per partition name partitions of the topic only."""
        for name, offsets in (("startingOffset", self.starting), ("endingOffset", self.ending)):
            unknown = sorted(p for p in offsets if p >= count) if isinstance(offsets, dict) else []
            if unknown:
                raise ValueError(
                    f"option {name} names partition {unknown[0]}, but topic "
                    f"{self.topic_name!r} has {count} partition(s)"
                )

    def client(self, producer_id: int | None = None) -> Client:
        """A client that finds the leader through any of the brokers."""
        return Client(
            self.brokers,
            secret=self.secret,
            timeout=self.timeout_s,
            producer_id=producer_id,
            **self.tls,
        )

    def replica_client(self, address: str) -> Client:
        """A client of one node only: it reads up to the commit offset that node knows."""
        timeout = min(self.timeout_s, REPLICA_TIMEOUT_S_MAX)
        return Client(address, secret=self.secret, timeout=timeout, direct=True, **self.tls)


@contextmanager
def planning(options: Options) -> Iterator[Client]:
    """A leader-routed client for the driver's calls; its errors name the brokers."""
    try:
        with options.client() as client:
            yield client
    except DataLossError:
        raise
    except QuorumLogError as exc:  # the same class (UnknownTopicError, say), named brokers
        raise type(exc)(f"quorumlog brokers {','.join(options.brokers)}: {exc}") from exc


def _at(offsets: str | int | dict[int, str | int], partition: int, default: str) -> str | int:
    return offsets.get(partition, default) if isinstance(offsets, dict) else offsets


def _brokers(value: str | None) -> tuple[str, ...]:
    brokers = tuple(b.strip() for b in (value or "").split(",") if b.strip())
    if not brokers:
        raise ValueError('the quorumlog data source needs .option("brokers", "HOST:PORT,...")')
    for broker in brokers:
        host, _, port = broker.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"option brokers: {broker!r} is not HOST:PORT")
    return brokers


def _secret(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        return read_secret_file(path)
    except ValueError as exc:
        raise ValueError(f"option secretFile: {exc}") from None


def _topic(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.strip():
        raise ValueError("option topic must name a topic")
    return value.strip()


def _number(options, name: str, default, kind: type):
    text = options.get(name)
    if text is None:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        unit = "seconds" if kind is float else "an integer"
        raise ValueError(f"option {name} must be a positive number ({unit}), not {text!r}")
    return value


def _offset(
    options, name: str, default: str, words: tuple[str, ...]
) -> str | int | dict[int, str | int]:
    text = options.get(name, default).strip().lower()
    if text.startswith("{"):
        return _offset_map(name, text, words)
    if text in words:
        return text
    if text.isdigit():
        return int(text)
    raise ValueError(
        f"option {name} must be {' | '.join(words)} or an offset >= 0, not {options.get(name)!r}"
    )


def _offset_map(name: str, text: str, words: tuple[str, ...]) -> dict[int, str | int]:
    """{"0": 10, "1": -2}: Kafka's JSON offsets of one topic (-2 earliest, -1 latest)."""
    codes = {code: word for code, word in OFFSET_CODES.items() if word in words}
    try:
        entries = json.loads(text)
    except ValueError:
        entries = None
    if (
        isinstance(entries, dict)
        and entries
        and all(
            key.isdigit() and type(value) is int and (value >= 0 or value in codes)
            for key, value in entries.items()
        )
    ):
        return {int(key): codes.get(value, value) for key, value in entries.items()}
    meaning = ", ".join(f"{code} {word}" for code, word in codes.items())
    raise ValueError(
        f'option {name} must map partitions to offsets, as {{"0": 10, "1": {min(codes)}}} '
        f"({meaning}), not {text!r}"
    )


def _boolean(options, name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {text!r}")
    return text.strip().lower() == "true"
