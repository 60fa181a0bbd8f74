"""The documentation's snippets run as written, in order, in one shell after the tour: the
README's tour commands (all but those that never end), then every Python block of the README
and then of each docs page in DOC_ORDER, against one real cluster (its addresses put in
place of 127.0.0.1:7001-7003 and the Kafka port 9092), each block in a fresh interpreter
started outside the clone's folder, as a user's script would be. No block is helped by the
test: each finds the state the ones before it left (a docs page's blocks may use the tour's
topic `events`, say), so the order below is part of the documentation."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

from tests.process.kafka_support import kafka_cluster

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
# The pages whose Python blocks run, in this order, after the README's: each page's blocks
# may rely on what the README's and the earlier pages' blocks left.
DOC_ORDER = (
    "docs/python.md",
    "docs/spark.md",
    "docs/groups.md",
    "docs/kafka.md",
    "docs/compaction.md",
)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
TOUR_BLOCK = re.compile(r"^## A quick tour\n.*?^```\n(.*?)^```", re.DOTALL | re.MULTILINE)
# Tour lines a test cannot run as written: one that waits for ever, and the demo's own
# throw-away cluster (tests/process/test_cli.py runs it).
NOT_RUN = ("--follow", "quorumlog demo")


def read(path: str) -> str:
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def readme() -> str:
    return read("README.md")


def python_blocks() -> list[tuple[str, str]]:
    """(page, block) for every Python block: the README's, then each page's of DOC_ORDER."""
    return [
        (page, block)
        for page in ("README.md", *DOC_ORDER)
        for block in PYTHON_BLOCK.findall(read(page))
    ]


def pages_with_python_blocks() -> set[str]:
    pages = glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    return {
        os.path.relpath(page, ROOT).replace(os.sep, "/")
        for page in pages
        if PYTHON_BLOCK.search(read(os.path.relpath(page, ROOT)))
    }


def tour_commands() -> list[str]:
    [tour] = TOUR_BLOCK.findall(readme())
    return [line for line in tour.splitlines() if line and not any(n in line for n in NOT_RUN)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("readme")))


def test_the_readme_has_a_tour_and_the_docs_python_blocks():
    assert len(tour_commands()) >= 10
    assert len(python_blocks()) >= 5
    # A page whose Python blocks are not in DOC_ORDER would never run: add it there, or fence
    # what is not meant to run as ```text.
    assert pages_with_python_blocks() <= set(DOC_ORDER)


@pytest.mark.slow
def test_the_tour_then_every_python_block_runs_in_order(cluster, tmp_path):
    places = {f"127.0.0.1:{7001 + i}": cluster.address(i + 1) for i in range(3)}
    places["127.0.0.1:9092"] = f"127.0.0.1:{cluster.kafka_ports[0]}"

    def placed(text: str) -> str:
        for written, real in places.items():
            text = text.replace(written, real)
        return text

    # The shell of a user who activated the venv: `quorumlog` on the PATH.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    for command in tour_commands():
        ran = subprocess.run(
            ["bash", "-o", "pipefail", "-c", placed(command)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, f"tour: {command}\n{ran.stderr[-3000:]}"
    for number, (page, block) in enumerate(python_blocks(), 1):
        ran = subprocess.run(
            [sys.executable, "-c", placed(block)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, f"block {number} ({page}):\n{block}\n{ran.stderr[-3000:]}"
