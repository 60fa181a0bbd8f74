"""The data source's options: Spark's strings parsed and checked into plain, picklable
settings, and the clients they make."""

from __future__ import annotations

from dataclasses import dataclass

from quorumlog.client import Client
from quorumlog.errors import QuorumLogError
from quorumlog.protocol import read_secret_file

RECORDS_PER_PARTITION = 50_000
REPLICA_TIMEOUT_S_MAX = 5.0  # one replica's turn at a call; then the next one
KAFKA_NAMES = {  # options of Spark's Kafka source that users carry over
    "startingoffsets": "startingOffset",
    "endingoffsets": "endingOffset",
    "maxoffsetspertrigger": "maxRecordsPerTrigger",
    "kafka.bootstrap.servers": "brokers",
}


class DataLossError(QuorumLogError):
    """Records were removed by retention before they were read."""


@dataclass(frozen=True)
class Options:
    """Plain, picklable settings (readers and writers are pickled to the workers)."""

    brokers: tuple[str, ...]
    secret: bytes | None = None
    timeout_s: float = 30.0
    starting: str | int = "earliest"  # earliest | latest | N
    ending: str | int = "latest"  # latest | N
    max_records_per_trigger: int | None = None
    records_per_partition: int = RECORDS_PER_PARTITION
    fail_on_data_loss: bool = True

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
            starting=_offset(options, "startingOffset", "earliest", ("earliest", "latest")),
            ending=_offset(options, "endingOffset", "latest", ("latest",)),
            max_records_per_trigger=_number(options, "maxRecordsPerTrigger", None, int),
            records_per_partition=_number(
                options, "recordsPerPartition", RECORDS_PER_PARTITION, int
            ),
            fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        )

    def client(self, producer_id: int | None = None) -> Client:
        """A client that finds the leader through any of the brokers."""
        return Client(
            self.brokers, secret=self.secret, timeout=self.timeout_s, producer_id=producer_id
        )

    def replica_client(self, address: str) -> Client:
        """A client of one node only: it reads up to the commit offset that node knows."""
        timeout = min(self.timeout_s, REPLICA_TIMEOUT_S_MAX)
        return Client(address, secret=self.secret, timeout=timeout, direct=True)


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


def _offset(options, name: str, default: str, words: tuple[str, ...]) -> str | int:
    text = options.get(name, default).strip().lower()
    if text in words:
        return text
    if text.isdigit():
        return int(text)
    raise ValueError(
        f"option {name} must be {' | '.join(words)} or an offset >= 0, not {options.get(name)!r}"
    )


def _boolean(options, name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {text!r}")
    return text.strip().lower() == "true"
