"""What the measured processes use: CPU seconds from /proc, the servers' and the client's
over an interval, and the nodes' peak resident memory."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from quorumlog.cli.localcluster import ProcessCluster


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuMeter:
    """CPU seconds (user + system) of the servers' processes, summed, and of this process
    (the clients'), read at the two ends of a measured interval."""

    server_pids: tuple[int, ...]

    def read(self) -> tuple[float, float]:
        return sum(cpu_s(pid) for pid in self.server_pids), time.process_time()

    def since(self, start: tuple[float, float]) -> tuple[float, float]:
        """What the servers and this process used since `start` (a `read`)."""
        server, client = self.read()
        return server - start[0], client - start[1]


def peak_rss_row(cluster: ProcessCluster, figure: str = "peak RSS per node") -> dict:
    """The peak resident memory of each running node so far (VmHWM), in MB."""
    return {"figure": figure, **{f"node{i}_mb": mb for i, mb in cluster.peak_rss_mb().items()}}
