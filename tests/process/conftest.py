from __future__ import annotations

import pytest

from bench.cluster import ProcessCluster


@pytest.fixture
def cluster(tmp_path):
    c = ProcessCluster(str(tmp_path))
    c.start_all()
    yield c
    c.stop_all()
