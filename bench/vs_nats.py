"""`quorumlog bench vs-nats`: NATS JetStream with three replicas beside quorumlog, the same
workload in the same run on the same machine.

Both are three servers on loopback, fed 1 KiB random records by a closed loop of N tasks
sharing one client: for quorumlog the public `AsyncClient` (acks=quorum: fsynced on a
majority before the answer), for NATS nats-py's JetStream `publish`, which waits for the
stream's acknowledgement (R3: stored by a majority of the stream's replicas). Mind what
that acknowledgement means: JetStream writes to its file store and acknowledges without an
fsync (it syncs every 2 minutes by default), so quorumlog does strictly more per record.
NATS has no batch publish: a call of 64 records publishes them all at once and waits for
every acknowledgement. Then the blocking `Client` shared by 64 threads, beside the
`AsyncClient` with 64 calls in flight. Both clusters run at once, and each case is measured
on NATS and right after on quorumlog, in each of three rounds: a figure is the median
round's rate, its percentiles are over the calls of all rounds, and a ratio is the median
of the rounds' ratios (every round's rate and ratio are kept beside, to show the noise).
Last, what the disk itself gives three replicas on this one machine: three loops at once,
each writing 1 MiB and fsyncing it, as a replica does with 64 calls of 64 records in
flight; the 64-record row's MB/s is set beside it.

nats-server comes from Debian (installed on demand where `apt-get` works as root) and
nats-py from the `dev` extra; without either the scenario prints one line saying why and
measures nothing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import trio

from quorumlog.bench.clients import async_run, record_pool, threads_run
from quorumlog.bench.report import print_table
from quorumlog.bench.resources import CpuMeter
from quorumlog.bench.rounds import paired_ratio, round_fields
from quorumlog.bench.workload import AppendRun, raw_disk_mb_s, running_cluster
from quorumlog.cli.localcluster import free_ports

# (calls in flight, records per call): a sweep of windows for the plot, then big calls.
CASES = ((1, 1), (4, 1), (16, 1), (64, 1), (64, 64))
FULL_S, QUICK_S, TINY_S = 5.0, 2.0, 0.5
FULL_ROUNDS = 3  # each figure is the median of this many rounds (one with --quick)
THREADS = 64
MIB = 1024 * 1024
CLIENT_SYSTEM = "quorumlog Client, threads, acks=quorum"
STREAM = "BENCH"
DISK_FIGURE = "raw disk: 3 writers at once, 1 MiB + fsync each"
DISK_MIB = {"tiny": 4, "quick": 32, "full": 64}  # written by each writer, each of 3 runs


def nats_server() -> str | None:
    """The nats-server binary, installed from Debian if it is missing and we may."""
    found = shutil.which("nats-server")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        for step in (["apt-get", "update"], ["apt-get", "install", "-y", "nats-server"]):
            subprocess.run(step, capture_output=True, timeout=600, check=False)
        found = shutil.which("nats-server")
    return found


def unavailable() -> str | None:
    """Why NATS cannot be measured here, or None."""
    try:
        import nats  # noqa: F401
    except ImportError:
        return "nats-py is not installed (it is in the `dev` extra: make test installs it)"
    if nats_server() is None:
        return "no nats-server (Debian's package nats-server) and it could not be installed"
    return None


@contextmanager
def nats_cluster(binary: str) -> Iterator[tuple[list[str], CpuMeter]]:
    """Three JetStream servers clustered on loopback; their client URLs, and a meter of
    their CPU."""
    root = tempfile.mkdtemp(prefix="quorumlog-bench-nats-")
    ports, routes = free_ports(3), free_ports(3)
    procs = []
    try:
        for i in range(3):
            others = ", ".join(
                f"nats-route://127.0.0.1:{r}" for j, r in enumerate(routes) if j != i
            )
            config = os.path.join(root, f"n{i}.conf")
            with open(config, "w") as f:
                f.write(
                    f"port: {ports[i]}\nhost: 127.0.0.1\nserver_name: n{i}\n"
                    f"jetstream {{ store_dir: {root}/n{i} }}\n"
                    f"cluster {{ name: bench, host: 127.0.0.1, port: {routes[i]}, "
                    f"routes: [{others}] }}\n"
                )
            log = open(os.path.join(root, f"n{i}.log"), "wb")  # noqa: SIM115
            procs.append(subprocess.Popen([binary, "-c", config], stdout=log, stderr=log))
        yield [f"nats://127.0.0.1:{p}" for p in ports], CpuMeter(tuple(p.pid for p in procs))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


async def _nats_run(
    urls: list[str],
    window: int,
    per_call: int,
    duration_s: float,
    warmup_s: float,
    meter: CpuMeter,
) -> AppendRun:
    import nats
    from nats.js.api import StorageType

    pool = record_pool()
    nc = await nats.connect(servers=urls, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream(timeout=30)
        deadline = time.monotonic() + 60
        while True:  # until the cluster has elected its JetStream leaders
            try:
                await js.add_stream(
                    name=STREAM, subjects=["bench"], num_replicas=3, storage=StorageType.FILE
                )
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        run = AppendRun()
        issued = 0
        start = time.monotonic()
        measure_from, end = start + warmup_s, start + warmup_s + duration_s
        last_done = measure_from

        async def worker() -> None:
            nonlocal issued, last_done
            while (sent := time.monotonic()) < end:
                issued += 1
                if per_call == 1:
                    await js.publish("bench", pool[issued % len(pool)])
                else:  # no batch publish in NATS: the call's records go at once, each acked
                    await asyncio.gather(
                        *(
                            js.publish("bench", pool[(issued * per_call + j) % len(pool)])
                            for j in range(per_call)
                        )
                    )
                done = time.monotonic()
                if sent >= measure_from:
                    run.appends += 1
                    run.records += per_call
                    run.latencies_s.append(done - sent)
                    last_done = max(last_done, done)

        cpu_from: tuple[float, float] | None = None

        async def read_cpu_at_start() -> None:
            nonlocal cpu_from
            await asyncio.sleep(measure_from - time.monotonic())
            cpu_from = meter.read()

        await asyncio.gather(read_cpu_at_start(), *(worker() for _ in range(window)))
        assert cpu_from is not None
        run.server_cpu_s, run.client_cpu_s = meter.since(cpu_from)
        run.elapsed_s = last_done - measure_from
        await js.delete_stream(STREAM)
        return run
    finally:
        await nc.close()


def _row(system: str, window: int, per_call: int, runs: list[AppendRun]) -> dict:
    return {
        "figure": f"{system} {per_call} rec/call w{window}",
        "system": system,
        "window": window,
        "records_per_append": per_call,
        **round_fields(runs),
    }


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    why = unavailable()
    if why is not None:
        print(f"bench vs-nats: skipped: {why}", file=sys.stderr)
        return [{"figure": "vs-nats skipped", "reason": why}]
    duration_s = TINY_S if tiny else QUICK_S if quick else FULL_S
    warmup_s = duration_s / 5
    rounds = 1 if tiny or quick else FULL_ROUNDS
    binary = nats_server()
    assert binary is not None
    nats_runs: dict[tuple[int, int], list[AppendRun]] = {case: [] for case in CASES}
    our_runs: dict[tuple[int, int], list[AppendRun]] = {case: [] for case in CASES}
    thread_runs: list[AppendRun] = []
    # Both clusters up at once, each case measured on one right after the other, in every
    # round: the machine's speed moves from minute to minute.
    with nats_cluster(binary) as (urls, nats_meter), running_cluster("vs-nats") as cluster:
        our_meter = CpuMeter(tuple(proc.pid for proc in cluster.procs.values()))
        for _ in range(rounds):
            for window, per_call in CASES:
                nats_runs[window, per_call].append(
                    asyncio.run(_nats_run(urls, window, per_call, duration_s, warmup_s, nats_meter))
                )
                our_runs[window, per_call].append(
                    trio.run(
                        partial(
                            async_run,
                            cluster.brokers,
                            window,
                            per_call,
                            "quorum",
                            duration_s,
                            warmup_s,
                            meter=our_meter,
                        )
                    )
                )
            # The blocking Client shared by threads, right after the AsyncClient's row.
            thread_runs.append(
                threads_run(cluster.brokers, THREADS, 1, "quorum", duration_s, warmup_s)
            )
    rows = [_row("NATS JetStream R3", *case, runs) for case, runs in nats_runs.items()]
    for (case, runs), nats_row in zip(our_runs.items(), list(rows), strict=True):
        row = _row("quorumlog acks=quorum", *case, runs)
        paired_ratio(row, nats_row, "ratio_to_nats")
        rows.append(row)
    row = _row(CLIENT_SYSTEM, THREADS, 1, thread_runs)
    same = next(r for r in rows if r["figure"] == f"quorumlog acks=quorum 1 rec/call w{THREADS}")
    paired_ratio(row, same, "ratio_to_async")
    rows.append(row)
    rows.append(_disk_row(DISK_MIB["tiny" if tiny else "quick" if quick else "full"]))
    big = next(r for r in rows if r["figure"] == "quorumlog acks=quorum 64 rec/call w64")
    big["ratio_to_disk"] = big["mb_s"] / rows[-1]["mb_s"]
    return rows


def _disk_row(mib: int) -> dict:
    """The disk's own ceiling for three replicas here (each writer's MB/s)."""
    directory = tempfile.mkdtemp(prefix="quorumlog-bench-disk-")  # where the nodes' data was
    try:
        mb_s = raw_disk_mb_s(directory, os.urandom(MIB), mib * MIB, fsync_every=1, writers=3)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {"figure": DISK_FIGURE, "system": "raw disk", "writers": 3, "mb_s": mb_s}


if __name__ == "__main__":
    print_table("bench vs-nats", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
