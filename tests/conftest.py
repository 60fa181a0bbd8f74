"""What every test shares."""

from __future__ import annotations

import os

from quorumlog.cli.localcluster import port_band


def pytest_collection_modifyitems(items):
    """The tests marked `slow` run first, in their order: `make test` runs the suite on two
    workers, and a test of a minute that started last would leave the other one idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_configure(config):
    """Each worker of a parallel run picks its nodes' ports from a band of its own (the
    processes it starts inherit it): a port is free while its node restarts, and a test on the
    other worker took one then and failed its node with "Address already in use"."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
    if worker and "QUORUMLOG_PORTS" not in os.environ:
        low, high = port_band()
        index, count = int(worker.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        width = (high - low) // count
        os.environ["QUORUMLOG_PORTS"] = f"{low + index * width}-{low + (index + 1) * width}"
