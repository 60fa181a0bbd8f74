"""Smoke test of `quorumlog bench spark` in its smallest size (needs the spark extra)."""

from __future__ import annotations

import pytest

from tests.bench.test_bench_smoke import _by_figure, _no_serve_left, _positive, _written

pytest.importorskip("pyspark")


@pytest.mark.slow
def test_spark_smallest(tmp_path):
    from quorumlog.bench import spark
    from quorumlog.bench.scenarios import SCENARIOS, scenario

    assert scenario("spark") is spark.run and "spark" in SCENARIOS
    rows = _by_figure(_written(tmp_path, "spark", spark.run(tiny=True)))
    read = rows["Spark batch read, local[2]"]
    baseline = rows["Client read, 1 process"]
    assert read["records"] == baseline["records"] > spark.TINY.records * 0.9
    _positive(read, "records_s", "mb_s", "partitions", "ratio_to_client")
    _positive(baseline, "records_s", "mb_s")
    assert read["ratio_to_client"] == pytest.approx(read["records_s"] / baseline["records_s"])
    assert "session_s" in rows["SparkSession start, local[2]"]
    _no_serve_left()
