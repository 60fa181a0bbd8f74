"""A node's listeners besides --listen, kept in its data directory (issue 44).

The Kafka listener and the console are part of a node's identity: the other nodes learn
its Kafka address and advertise it to Kafka clients, so a node restarted without it left
clients connecting to a dead address. `serve` records what its listeners need in
DATA/listeners.json (written atomically: temp file, fsync, rename, fsync of the directory)
and a restart given only --id, --data and --listen serves them again; a setting given
again (flag, environment or --config) overrides the recorded one and is recorded. A data
directory of an older version, without the file, starts with what it is given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from quorumlog.console.options import HttpOptions
from quorumlog.log.files import (
    CorruptionError,
    OsFileSystem,
    read_whole_file,
    write_file_atomically,
)

LISTENERS_FILE = "listeners.json"


@dataclass(frozen=True)
class Listeners:
    """By the names of serve's parameters; the defaults are serve's."""

    kafka_listen: str | None = None
    http_listen: str | None = None
    http_allow_writes: bool = False
    http_auth_metrics: bool = False
    auto_create_topics: bool = False
    auto_create_partitions: int = 1
    auto_create_replicas: int = 3
    # PEM files, absolute: a restart may run from another working directory.
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None

    @property
    def http(self) -> HttpOptions | None:
        if self.http_listen is None:
            return None
        return HttpOptions(self.http_listen, self.http_allow_writes, self.http_auth_metrics)

    @property
    def auto_create(self) -> tuple[int, int] | None:
        """(partitions, replicas) of a topic a Kafka client names unknown, or None."""
        if not self.auto_create_topics:
            return None
        return self.auto_create_partitions, self.auto_create_replicas

    @property
    def tls(self) -> tuple[str, str, str] | None:
        """(certificate, key, CA), or None: plain TCP."""
        if self.tls_cert is None or self.tls_key is None or self.tls_ca is None:
            return None
        return self.tls_cert, self.tls_key, self.tls_ca

    def addresses(self) -> list[tuple[str, str]]:
        """(flag, HOST:PORT) of each listener this node opens besides --listen."""
        named = (("--kafka-listen", self.kafka_listen), ("--http-listen", self.http_listen))
        return [(flag, address) for flag, address in named if address is not None]


def setting_of(flag: str) -> str:
    """The setting a flag of serve gives: --kafka-listen -> kafka_listen."""
    return flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class Restored:
    listeners: Listeners
    recorded: Listeners | None  # what the data directory held; None: no file
    # The settings taken from the file (not given this time), by name, for the log line.
    from_file: dict[str, Any]


def restore(data_dir: str, given: Mapping[str, Any]) -> Restored:
    """The listeners to serve: those recorded in `data_dir`, overridden by the settings
    `given` (by Listeners' field names). Raises CorruptionError on an unreadable file."""
    recorded = _read(data_dir)
    listeners = replace(recorded or Listeners(), **given)
    from_file = {}
    if recorded is not None:
        defaults = asdict(Listeners())
        from_file = {
            name: value
            for name, value in asdict(recorded).items()
            if name not in given and value != defaults[name]
        }
    return Restored(listeners, recorded, from_file)


def record(data_dir: str, listeners: Listeners) -> None:
    data = json.dumps(asdict(listeners), indent=1).encode()
    write_file_atomically(OsFileSystem(), os.path.join(data_dir, LISTENERS_FILE), data)


def _read(data_dir: str) -> Listeners | None:
    path = os.path.join(data_dir, LISTENERS_FILE)
    fs = OsFileSystem()
    if not fs.exists(path):
        return None
    try:
        return Listeners(**json.loads(read_whole_file(fs, path)))
    except (ValueError, TypeError) as exc:
        raise CorruptionError(path, 0, f"unreadable listeners file: {exc}") from None
