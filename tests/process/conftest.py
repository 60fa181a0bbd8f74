from __future__ import annotations

import pytest

from quorumlog.cli.localcluster import ProcessCluster


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory):
    c = ProcessCluster(str(tmp_path_factory.mktemp("shared")))
    c.start_all()
    c.wait_for_leader()
    yield c
    c.stop_all()


@pytest.fixture
def cluster(request, tmp_path):
    """Three started nodes: the test's own, or, for a test marked `shares_cluster` (it
    only adds what it then reads, and stops no node), its module's, started once: a start
    costs seconds of CPU, and the suite starts hundreds."""
    if request.node.get_closest_marker("shares_cluster") is not None:
        yield request.getfixturevalue("module_cluster")
        return
    c = ProcessCluster(str(tmp_path))
    c.start_all()
    yield c
    c.stop_all()
