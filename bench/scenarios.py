"""The scenarios of `quorumlog bench`, by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable

# name -> module with `run(quick: bool) -> list[dict]`
SCENARIOS = {
    "storage": "quorumlog.bench.storage",
    "transport": "quorumlog.bench.transport",
    "produce": "quorumlog.bench.produce",
    "recovery": "quorumlog.bench.recovery",
    "failover": "quorumlog.bench.failover",
    "membership": "quorumlog.bench.membership",
    "scale": "quorumlog.bench.scale",
    "partitions": "quorumlog.bench.partitions",
    "moves": "quorumlog.bench.moves",
    "elections": "quorumlog.bench.elections",
    "sim": "quorumlog.bench.sim",
    "nemesis": "quorumlog.bench.nemesis",
    "spark": "quorumlog.bench.spark",
    "consume": "quorumlog.bench.consume",
    "kafka": "quorumlog.bench.kafka",
    "vs-nats": "quorumlog.bench.vs_nats",
    "vs-kafka": "quorumlog.bench.vs_kafka",
    "gray": "quorumlog.bench.gray",
    "timestamps": "quorumlog.bench.timestamps",
    "witness": "quorumlog.bench.witness",
    "groups-log": "quorumlog.bench.groups_log",
    "rebalance": "quorumlog.bench.rebalance",
    "console": "quorumlog.bench.console",
    "soak": "quorumlog.bench.soak",
    "compaction": "quorumlog.bench.compaction",
}


def scenario(name: str) -> Callable[..., list[dict]]:
    return importlib.import_module(SCENARIOS[name]).run
