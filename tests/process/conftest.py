from __future__ import annotations

import pytest

from quorumlog.cli.localcluster import ProcessCluster


@pytest.fixture
def cluster(tmp_path):
    c = ProcessCluster(str(tmp_path))
    c.start_all()
    yield c
    c.stop_all()
