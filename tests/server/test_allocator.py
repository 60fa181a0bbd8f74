"""A node keeps the memory it frees (quorumlog/server/allocator.py): a large buffer made again and
again stops costing a page fault per page."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

FAULTS_PER_MIB = """
import resource, sys
from quorumlog.server.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
data = bytes(1 << 20)
for _ in range(5):  # warm up
    bytes(bytearray(data))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    copy = bytes(bytearray(data))  # two fresh 1 MiB buffers, freed at once
    del copy
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


def faults_per_mib(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_MIB, mode], capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def test_buffers_made_again_reuse_their_pages():
    assert faults_per_mib("default") > 100  # glibc's defaults: fresh pages every time
    assert faults_per_mib("keep") < 10
