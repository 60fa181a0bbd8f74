"""What `quorumlog serve` is told: its options, a --config file's settings and the peers'
list, checked before anything starts (server/server.py runs the node with them). Kept
apart from the node itself so that the command line reads them without loading it."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from quorumlog.log.config import LogConfig
from quorumlog.raft.settings import RaftSettings
from quorumlog.transport.addresses import parse_address


class UsageError(Exception):
    pass


@dataclass(frozen=True)
class ServeOptions:
    node_id: int
    data_dir: str
    listen: str
    peers: dict[int, str] | None
    secret: bytes | None
    settings: RaftSettings
    log_config: LogConfig
    repair: bool = False
    join: bool = False
    # The Kafka listener, the console (/, /api/, /metrics) and what they need (auto-create,
    # TLS files), by the names of `Listeners`: those given to this run (flag, environment or
    # --config); the others are those recorded in the data directory (server/listeners.py).
    listeners: Mapping[str, Any] = field(default_factory=dict)


# The [node] table of a --config file: TOML key -> serve's parameter.
NODE_KEYS = {
    "id": "node_id",
    "data": "data_dir",
    "listen": "listen",
    "peers": "peers",
    "secret_file": "secret_file",
    "metrics": "metrics",
    "http_listen": "http_listen",
    "http_allow_writes": "http_allow_writes",
    "http_auth_metrics": "http_auth_metrics",
    "kafka_listen": "kafka_listen",
    "auto_create_topics": "auto_create_topics",
    "auto_create_partitions": "auto_create_partitions",
    "auto_create_replicas": "auto_create_replicas",
    "log_format": "log_format",
    "tls_cert": "tls_cert",
    "tls_key": "tls_key",
    "tls_ca": "tls_ca",
}


@dataclass(frozen=True)
class ConfigFile:
    node_defaults: dict[str, Any]
    raft: RaftSettings
    log: LogConfig


def settings_help() -> str:
    """Every setting of a --config file, with its default."""
    lines = [
        "[node]  # id, data, listen, peers, secret_file, http_listen (metrics), "
        "http_allow_writes, http_auth_metrics, kafka_listen, log_format, auto_create_topics, "
        "auto_create_partitions, auto_create_replicas, tls_*: as the flags"
    ]
    for section, cls in (("raft", RaftSettings), ("log", LogConfig)):
        lines.append(f"[{section}]")
        defaults = cls()
        for f in fields(cls):
            lines.append(f"{f.name} = {getattr(defaults, f.name)!r}")
    return "\n".join(lines)


def load_config_file(path: str | None) -> ConfigFile:
    """Settings from a TOML file with [node], [raft] and [log] tables; unknown keys are errors."""
    if path is None:
        return ConfigFile({}, RaftSettings(), LogConfig())
    try:
        with open(path, "rb") as f:
            document: dict[str, Any] = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read config file {path}: {exc}") from None
    unknown = set(document) - {"node", "raft", "log"}
    if unknown:
        raise UsageError(f"{path}: unknown tables {sorted(unknown)} (expected node, raft, log)")
    node = document.get("node", {})
    unknown = set(node) - set(NODE_KEYS)
    if unknown:
        raise UsageError(f"{path}: unknown [node] settings {sorted(unknown)}")
    if isinstance(node.get("peers"), dict):
        node["peers"] = ",".join(f"{k}={v}" for k, v in node["peers"].items())
    try:
        return ConfigFile(
            {NODE_KEYS[k]: v for k, v in node.items()},
            RaftSettings(**document.get("raft", {})),
            LogConfig(**document.get("log", {})),
        )
    except (TypeError, ValueError, AssertionError) as exc:
        raise UsageError(f"{path}: invalid setting: {exc}") from None


def parse_peers(text: str | None) -> dict[int, str] | None:
    if not text:
        return None
    peers = {}
    for item in text.split(","):
        node, sep, address = item.strip().partition("=")
        if not sep or not node.isdigit():
            raise UsageError(f"--peers wants ID=HOST:PORT items, not {item!r}")
        parse_address(address)
        peers[int(node)] = address
    return peers
