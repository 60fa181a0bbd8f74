"""`quorumlog bench gray`: gray failures under a steady acks=quorum load: one slow disk,
a flapping disk, a paused leader, a CPU-starved node.

Three nodes on loopback; producers append through one shared `AsyncClient` to `default`,
10 records of 100 bytes per call, with 1 call in flight (a simple producer) and then 64.
Each node runs the fault harness's fsync hook (log.files.SyncJournal: a delay in
milliseconds written to a file in its data folder slows its every fsync). The slow-disk
phases, each measured in acknowledgements per second beside the healthy phase of the same
run:

- healthy;
- a follower's fsyncs 50 ms slower;
- the leader's fsyncs 50 ms slower: the rate, how long until a second's rate is back to
  0.7x healthy, and when leadership left the slow node (actors/services/disk_health.py);
- healthy again.

Then a flapping disk (the leader's fsyncs slow for 1 s in every 10) for a minute, counting
how often leadership moved. With `strace` on the machine, the same follower and leader
phases once more with the delay injected from outside the process
(`strace --seccomp-bpf -e inject=fsync,fdatasync:delay_enter=50000`): the node is restarted
under strace, and for the leader phase leadership is handed to it.

Pauses: the leader stopped (SIGSTOP) until the producer's next acknowledgement, ten
times: how long that took (the others elect a leader in about half a second; the client's
leader watch must find it). CPU starvation: a node stopped for 200 ms in every 400, the
leader then a follower, in acknowledgements per second beside healthy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import trio

from quorumlog.bench.faults import fsync_delay_path
from quorumlog.bench.report import median, print_table
from quorumlog.bench.workload import status_of
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.aclient import AsyncClient
from quorumlog.client.errors import QuorumLogError

SLOW_MS = 50
RECORDS = [b"r" * 100] * 10
RECOVERED = 0.7  # of the healthy rate: the target
STRACE = [
    "strace",
    "-f",
    "-qq",
    "--seccomp-bpf",
    "-e",
    "trace=fsync,fdatasync",
    "-e",
    f"inject=fsync,fdatasync:delay_enter={SLOW_MS * 1000}",
    "-o",
    "/dev/null",
    "--",
]


@dataclass(frozen=True)
class Sizes:
    phase_s: float
    leader_phase_s: float
    flap_s: float
    pauses: int
    windows: tuple[int, ...] = (1, 64)


FULL = Sizes(phase_s=6.0, leader_phase_s=10.0, flap_s=60.0, pauses=10)
QUICK = Sizes(phase_s=4.0, leader_phase_s=8.0, flap_s=30.0, pauses=5)
TINY = Sizes(phase_s=1.0, leader_phase_s=4.0, flap_s=0.0, pauses=1, windows=(8,))


@dataclass
class Load:
    """A closed loop of appends; the times of their acknowledgements."""

    acks: list[float] = field(default_factory=list)

    def rate(self, start: float, end: float) -> float:
        return sum(start <= t < end for t in self.acks) / (end - start) if end > start else 0.0

    async def run(self, brokers: str, window: int, stop: trio.Event) -> None:
        async with AsyncClient(brokers, timeout=30.0) as client:

            async def worker() -> None:
                while not stop.is_set():
                    try:
                        await client.append(RECORDS, acks="quorum")
                    except QuorumLogError:
                        continue
                    self.acks.append(trio.current_time())

            async with trio.open_nursery() as nursery:
                for _ in range(window):
                    nursery.start_soon(worker)


class Cluster:
    """Three nodes with the fsync hook; a node may be restarted under strace."""

    def __init__(self, root: str):
        os.makedirs(root)
        self.procs = ProcessCluster(root, env={"QUORUMLOG_FAULT_SYNC_JOURNAL": "1"})
        self.procs.start_all()

    def slow(self, node_id: int, delay_ms: float | None) -> None:
        path = fsync_delay_path(self.procs.data_dir(node_id))
        if delay_ms is None:
            os.remove(path)
        else:
            with open(path, "w") as f:
                f.write(str(delay_ms))

    async def leader(self, timeout_s: float = 30.0) -> int:
        with trio.fail_after(timeout_s):
            while True:
                for node_id in self.procs.ids:
                    status = await status_of(self.procs.address(node_id))
                    if status and status["role"] == "leader":
                        return node_id
                await trio.sleep(0.05)

    def signal(self, node_id: int, sig: int) -> None:
        self.procs.procs[node_id].send_signal(sig)

    def restart(self, node_id: int, under_strace: bool) -> None:
        proc = self.procs.procs.pop(node_id)
        _stop(proc)
        if under_strace:
            self.procs.start(node_id, wrapper=STRACE)
        else:
            self.procs.start(node_id)

    def stop(self) -> None:
        for proc in self.procs.procs.values():
            _stop(proc)
        self.procs.procs.clear()


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the node (under strace, to strace's child: strace follows it out)."""
    for pid in _children(proc.pid) or [proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


async def _leader_phase(cluster: Cluster, load: Load, slow_node: int, healthy: float, s: Sizes):
    """From the moment `slow_node` leads with a slow disk: when leadership left it, and
    when a second's rate came back to RECOVERED of healthy."""
    start = trio.current_time()
    moved_s = None
    end = start + s.leader_phase_s
    while trio.current_time() < end:
        await trio.sleep(0.1)
        if moved_s is None and await cluster.leader() != slow_node:
            moved_s = trio.current_time() - start
    recovered_s = next(
        (
            t - start
            for t in _steps(start, end - 1.0, 0.1)
            if load.rate(t, t + 1.0) >= RECOVERED * healthy
        ),
        None,
    )
    tail = max(start, end - s.leader_phase_s / 2)
    return {
        "ratio": round(load.rate(tail, end) / healthy, 2),
        "whole_phase_ratio": round(load.rate(start, end) / healthy, 2),
        "leader_moved_after_s": None if moved_s is None else round(moved_s, 2),
        "back_to_0.7x_after_s": None if recovered_s is None else round(recovered_s, 2),
    }


def _steps(start: float, end: float, step: float) -> list[float]:
    out, t = [], start
    while t <= end:
        out.append(t)
        t += step
    return out


async def _hook_phases(cluster: Cluster, window: int, s: Sizes) -> list[dict]:
    load, stop = Load(), trio.Event()
    rows = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load.run, cluster.procs.brokers, window, stop)
        await trio.sleep(1.0)  # warm-up
        t0 = trio.current_time()
        await trio.sleep(s.phase_s)
        healthy = load.rate(t0, trio.current_time())
        rows.append(_row(window, "hook", "healthy", healthy, 1.0))
        leader = await cluster.leader()
        follower = next(i for i in cluster.procs.ids if i != leader)
        cluster.slow(follower, SLOW_MS)
        t0 = trio.current_time()
        await trio.sleep(s.phase_s)
        rate = load.rate(t0, trio.current_time())
        cluster.slow(follower, None)
        rows.append(_row(window, "hook", "slow disk on a follower", rate, rate / healthy))
        await trio.sleep(1.0)
        leader = await cluster.leader()
        cluster.slow(leader, SLOW_MS)
        found = await _leader_phase(cluster, load, leader, healthy, s)
        cluster.slow(leader, None)
        rows.append(
            {**_row(window, "hook", "slow disk on the leader", None, found["ratio"]), **found}
        )
        t0 = trio.current_time()
        await trio.sleep(s.phase_s)
        rate = load.rate(t0, trio.current_time())
        rows.append(_row(window, "hook", "healthy again", rate, rate / healthy))
        stop.set()
    return rows


async def _strace_phases(cluster: Cluster, window: int, s: Sizes) -> list[dict]:
    """The slow node restarted under strace: first as a follower, then given leadership."""
    load, stop = Load(), trio.Event()
    rows = []
    leader = await cluster.leader()
    slow = next(i for i in cluster.procs.ids if i != leader)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load.run, cluster.procs.brokers, window, stop)
        await trio.sleep(1.0)
        t0 = trio.current_time()
        await trio.sleep(s.phase_s)
        healthy = load.rate(t0, trio.current_time())
        rows.append(_row(window, "strace", "healthy", healthy, 1.0))
        cluster.restart(slow, under_strace=True)
        await trio.sleep(2.0)  # it catches up
        t0 = trio.current_time()
        await trio.sleep(s.phase_s)
        rate = load.rate(t0, trio.current_time())
        rows.append(_row(window, "strace", "slow disk on a follower", rate, rate / healthy))
        await trio.to_thread.run_sync(_transfer_leader, cluster.procs, slow)
        found = await _leader_phase(cluster, load, slow, healthy, s)
        rows.append(
            {**_row(window, "strace", "slow disk on the leader", None, found["ratio"]), **found}
        )
        stop.set()
    cluster.restart(slow, under_strace=False)
    return rows


async def _flapping(cluster: Cluster, s: Sizes) -> list[dict]:
    """The leader's disk slow 1 s in every 10: how often leadership moves."""
    node = await cluster.leader()
    moves, last = 0, node
    load, stop = Load(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load.run, cluster.procs.brokers, 1, stop)
        start = trio.current_time()
        while trio.current_time() - start < s.flap_s:
            cycle = trio.current_time()
            cluster.slow(node, SLOW_MS)
            slow = True
            while trio.current_time() - cycle < 10.0:
                if slow and trio.current_time() - cycle >= 1.0:
                    cluster.slow(node, None)
                    slow = False
                leader = await cluster.leader()
                moves += leader != last
                last = leader
                await trio.sleep(0.1)
        stop.set()
    minutes = s.flap_s / 60
    return [
        {
            "figure": "flapping disk: slow 1 s in every 10 (hook, 1 in flight)",
            "mode": "hook",
            "window": 1,
            "leader_moves": moves,
            "moves_per_minute": round(moves / minutes, 2),
            "target": "<= 1 per minute",
        }
    ]


def _transfer_leader(procs: ProcessCluster, node_id: int) -> None:
    with procs.client(timeout=30.0) as client:
        client.admin("transfer_leader", node_id=node_id)


def _row(window: int, mode: str, phase: str, acks_s: float | None, ratio: float) -> dict:
    return {
        "figure": f"{phase} ({mode}, {window} in flight)",
        "phase": phase,
        "mode": mode,
        "window": window,
        "acks_s": None if acks_s is None else round(acks_s),
        "ratio": round(ratio, 2),
    }


async def _pauses(cluster: Cluster, s: Sizes) -> list[dict]:
    """The leader paused until the producer's next acknowledgement, `s.pauses` times."""
    load, stop = Load(), trio.Event()
    gaps = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load.run, cluster.procs.brokers, 1, stop)
        for _ in range(s.pauses):
            await trio.sleep(1.0)
            leader = await cluster.leader()
            count = len(load.acks)
            paused_at = trio.current_time()
            cluster.signal(leader, signal.SIGSTOP)
            try:
                with trio.fail_after(30.0):
                    while len(load.acks) == count:
                        await trio.sleep(0.005)
                gaps.append(load.acks[count] - paused_at)
            finally:
                cluster.signal(leader, signal.SIGCONT)
            await trio.sleep(1.5)  # it hears of the new term and follows
        stop.set()
    return [
        {
            "figure": "leader paused (SIGSTOP): to the next acknowledgement (1 in flight)",
            "pauses": len(gaps),
            "median_s": round(median(gaps), 3),
            "max_s": round(max(gaps), 3),
            "target": "median <= 1 s",
        }
    ]


async def _starved(cluster: Cluster, s: Sizes) -> list[dict]:
    """A node stopped 200 ms in every 400 (CPU starvation), the leader then a follower."""
    rows = []
    load, stop = Load(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(load.run, cluster.procs.brokers, 1, stop)
        await trio.sleep(1.0)
        t0 = trio.current_time()
        await trio.sleep(s.phase_s)
        healthy = load.rate(t0, trio.current_time())
        leader = await cluster.leader()
        follower = next(i for i in cluster.procs.ids if i != leader)
        for role, node_id in (("leader", leader), ("follower", follower)):
            t0 = trio.current_time()
            while trio.current_time() - t0 < s.phase_s:
                cluster.signal(node_id, signal.SIGSTOP)
                await trio.sleep(0.2)
                cluster.signal(node_id, signal.SIGCONT)
                await trio.sleep(0.2)
            rate = load.rate(t0, trio.current_time())
            rows.append(
                {
                    "figure": f"{role} stopped 200 ms in every 400 (1 in flight)",
                    "acks_s": round(rate),
                    "healthy_acks_s": round(healthy),
                    "ratio": round(rate / healthy, 2),
                }
            )
            await trio.sleep(1.0)
        stop.set()
    return rows


async def _on_fresh_cluster(path: str, measure) -> list[dict]:
    """`measure(cluster)` on a new cluster in `path`, stopped after, on error too."""
    cluster = Cluster(path)
    try:
        await cluster.leader()
        return await measure(cluster)
    finally:
        cluster.stop()


async def _measure(root: str, s: Sizes, with_strace: bool) -> list[dict]:
    rows: list[dict] = []
    for window in s.windows:
        # A fresh cluster each time: a node that gave up leadership for its disk is
        # avoided for a minute afterwards (slow_fsync_cooldown_s).
        path = os.path.join(root, f"hook-{window}")
        rows += await _on_fresh_cluster(path, lambda c, w=window: _hook_phases(c, w, s))
        if with_strace:
            path = os.path.join(root, f"strace-{window}")
            rows += await _on_fresh_cluster(path, lambda c, w=window: _strace_phases(c, w, s))

    async def pauses_and_starvation(cluster: Cluster) -> list[dict]:
        found = await _pauses(cluster, s)
        return found + (await _starved(cluster, s) if s.flap_s else [])

    rows += await _on_fresh_cluster(os.path.join(root, "pauses"), pauses_and_starvation)
    if s.flap_s:
        rows += await _on_fresh_cluster(os.path.join(root, "flap"), lambda c: _flapping(c, s))
    return rows


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    s = TINY if tiny else QUICK if quick else FULL
    with_strace = shutil.which("strace") is not None and not tiny
    root = tempfile.mkdtemp(prefix="quorumlog-bench-gray-")
    try:
        rows = trio.run(_measure, root, s, with_strace)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    leader_rows = [r for r in rows if r.get("phase") == "slow disk on the leader"]
    if leader_rows:
        rows.append(
            {
                "figure": "slow disk on the leader: median ratio",
                "ratio": median(r["ratio"] for r in leader_rows),
                "target": ">= 0.7 within 5 s",
            }
        )
    return rows


if __name__ == "__main__":
    print_table("bench gray", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
