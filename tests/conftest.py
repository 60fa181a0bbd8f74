"""What every test shares."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from quorumlog.cli.localcluster import port_band
from tests.serving import serve_pids


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


@pytest.fixture(scope="session", autouse=True)
def _no_nodes_left_by_an_ended_worker(tmp_path_factory):
    """A worker past a test's timeout is ended at once (`timeout_method = "thread"`), and
    its test's nodes run on, orphaned: 1,000 partitions' elections on three of them slowed
    every later test of the run, and more timed out. The worker xdist starts in its place
    stops the nodes of every earlier worker of this run that is gone."""
    run_dir = tmp_path_factory.getbasetemp().parent  # pytest-N: each worker's folder is in it
    for pid in serve_pids(str(run_dir)):
        if _parent_of(int(pid)) == 1:  # its worker is gone
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
