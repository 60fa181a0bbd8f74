"""The scenarios of `quorumlog bench`, by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable

# name -> module with `run(quick: bool) -> list[dict]`
SCENARIOS = {
    "storage": "bench.storage",
    "transport": "bench.transport",
    "produce": "bench.produce",
    "recovery": "bench.recovery",
    "failover": "bench.failover",
    "membership": "bench.membership",
    "scale": "bench.scale",
    "partitions": "bench.partitions",
    "sim": "bench.sim",
    "nemesis": "bench.nemesis",
    "spark": "bench.spark",
    "consume": "bench.consume",
    "kafka": "bench.kafka",
    "vs-nats": "bench.vs_nats",
    "gray": "bench.gray",
    "timestamps": "bench.timestamps",
}


def scenario(name: str) -> Callable[..., list[dict]]:
    return importlib.import_module(SCENARIOS[name]).run
