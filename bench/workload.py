"""What the cluster scenarios share: a cluster in a temporary folder, windowed and open-loop
appends on one pipelined connection, exact percentiles, status polling, and the two physical
baselines (the raw disk loop and a raw loopback trio socket) measured in the same run.

Latencies are exact: every append's latency is kept and sorted; percentiles are nearest-rank
on that sample, never derived from means. MB is 10**6 bytes of record values (1 KiB each).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import trio

from quorumlog.bench.storage import _raw_append
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from quorumlog.log.records import make_data_batch
from quorumlog.transport.errors import TransportError
from quorumlog.transport.messages import (
    Acks,
    AppendReply,
    AppendRequest,
    ErrorCode,
    ErrorReply,
    Message,
    StatusReply,
    StatusRequest,
)
from quorumlog.transport.tcp import open_connection

KIB = 1024
MB = 1_000_000
RECORD_BYTES = 1024
T = TypeVar("T")

ACKS = {"quorum": Acks.QUORUM, "leader": Acks.LEADER, "none": Acks.NONE}


# --- data ---------------------------------------------------------------------------------


def make_batches(
    records_per_batch: int, count: int = 16, seed: int = 1, record_bytes: int = RECORD_BYTES
) -> list[bytes]:
    """`count` distinct batches of random (incompressible) records, encoded once."""
    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    return [
        make_data_batch(
            [(None, rng.randbytes(record_bytes), now_ms, None) for _ in range(records_per_batch)],
            compress=False,
        )
        for _ in range(count)
    ]


class IncompressibleRecords:
    """Record values that zstd cannot shrink: distinct slices of a random pool, so that a
    batch holds no repeats (the client compresses each batch when that pays)."""

    POOL_BYTES = 8 * 1024 * 1024

    def __init__(self, record_bytes: int, seed: int = 1):
        self._pool = random.Random(seed).randbytes(self.POOL_BYTES)
        self._size = record_bytes
        self._next = 0

    def take(self, count: int) -> list[bytes]:
        out = []
        for _ in range(count):
            at = (self._next * self._size) % (self.POOL_BYTES - self._size)
            out.append(self._pool[at : at + self._size])
            self._next += 1
        return out


# --- percentiles --------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted, exact sample."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_fields(latencies_s: list[float]) -> dict:
    ordered = sorted(latencies_s)
    return {
        "p50_ms": percentile(ordered, 50) * 1000,
        "p99_ms": percentile(ordered, 99) * 1000,
        "max_ms": (ordered[-1] * 1000) if ordered else math.nan,
        "samples": len(ordered),
    }


# --- clusters -----------------------------------------------------------------------------


def write_config(path: str, raft: dict | None = None, log: dict | None = None) -> None:
    """A `--config` TOML file with [raft] and [log] tables (RaftSettings, LogConfig fields)."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        return repr(v)

    lines = []
    for table, settings in (("raft", raft), ("log", log)):
        if settings:
            lines.append(f"[{table}]")
            lines += [f"{k} = {value(v)}" for k, v in settings.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


@contextmanager
def running_cluster(
    name: str,
    size: int = 3,
    raft: dict | None = None,
    log: dict | None = None,
    kafka: bool = False,
    env: dict[str, str] | None = None,
    http: bool = False,
) -> Iterator[ProcessCluster]:
    """A started cluster in a fresh temporary folder (with Kafka listeners if `kafka`, web
    consoles if `http`);
    everything stopped and removed after, on error too."""
    root = tempfile.mkdtemp(prefix=f"quorumlog-bench-{name}-")
    try:
        config = None
        if raft or log:
            config = os.path.join(root, "settings.toml")
            write_config(config, raft, log)
        kafka_ports = free_ports(size) if kafka else []
        cluster = ProcessCluster(
            root,
            size=size,
            config_file=config,
            kafka_ports=kafka_ports,
            env=env or {},
            http_ports=free_ports(size) if http else [],
        )
        try:
            cluster.start_all()
            _wait_for_first_leader(cluster, timeout_s=30.0)
            yield cluster
        finally:
            cluster.stop_all()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_first_leader(cluster: ProcessCluster, timeout_s: float) -> None:
    """Like cluster.wait_for_leader, but gives up at once if every node has exited, and
    says why (exit codes, log tails)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cluster.wait_for_leader(timeout_s=1.0)
            return
        except AssertionError:
            exited = all(p.poll() is not None for p in cluster.procs.values())
            if exited or time.monotonic() > deadline:
                why = "every node exited" if exited else f"no leader within {timeout_s} s"
                raise AssertionError(f"{why}\n{_cluster_report(cluster)}") from None


def _cluster_report(cluster: ProcessCluster, lines: int = 8) -> str:
    """Exit codes and the last lines of each node's log, for an error message."""
    out = []
    for node_id in cluster.ids:
        proc = cluster.procs.get(node_id)
        code = None if proc is None else proc.poll()
        out.append(f"node {node_id} at {cluster.address(node_id)}: exit code {code}")
        try:
            with open(os.path.join(cluster.root, f"node{node_id}.log"), errors="replace") as f:
                out += ["    " + line.rstrip() for line in f.readlines()[-lines:]]
        except OSError:
            pass
    return "\n".join(out)


def leader_address(cluster: ProcessCluster, timeout_s: float = 30.0) -> str:
    return cluster.address(cluster.wait_for_leader(timeout_s=timeout_s))


# --- appends ------------------------------------------------------------------------------


class LeaderMoved(Exception):
    """The node we append to answered NOT_LEADER (its hint, if any, is `address`)."""

    def __init__(self, address: str | None):
        super().__init__(f"not the leader; hint: {address}")
        self.address = address


@dataclass
class AppendRun:
    appends: int = 0
    records: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    last_offset: int = -1
    # Over the measured interval, when a CpuMeter was given: the servers' and the client's.
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0

    @property
    def records_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def mb_s(self) -> float:
        return self.records_s * RECORD_BYTES / MB


def _check(reply, run: AppendRun) -> bool:
    if isinstance(reply, AppendReply):
        if reply.last_offset is not None:
            run.last_offset = max(run.last_offset, reply.last_offset)
        return True
    if isinstance(reply, ErrorReply) and reply.code is ErrorCode.NOT_LEADER:
        raise LeaderMoved(reply.leader_address)
    run.errors += 1
    return False


async def closed_loop(
    address: str,
    batches: Sequence[bytes],
    records_per_batch: int,
    acks: Acks,
    window: int,
    *,
    duration_s: float | None = None,
    total_appends: int | None = None,
    warmup_s: float = 0.0,
    timeout_s: float = 300.0,
) -> AppendRun:
    """`window` trio tasks, each appending the next batch as soon as its last one was
    answered, all on one pipelined connection; until `duration_s` or `total_appends`.
    Appends started during the first `warmup_s` are not counted. Raises TooSlowError if
    the run is not over after `timeout_s` (a stuck cluster must not hang the harness)."""
    assert duration_s is not None or total_appends is not None
    if duration_s is not None:
        timeout_s = min(timeout_s, warmup_s + duration_s + 60.0)
    run = AppendRun()
    issued = 0
    with trio.fail_after(timeout_s):
        async with open_connection(address) as conn:
            start = trio.current_time()
            measure_from = start + warmup_s
            end = math.inf if duration_s is None else measure_from + duration_s
            last_done = measure_from

            async def worker() -> None:
                nonlocal issued, last_done
                while True:
                    sent = trio.current_time()
                    if sent >= end or (total_appends is not None and issued >= total_appends):
                        return
                    batch = batches[issued % len(batches)]
                    issued += 1
                    reply = await conn.request(AppendRequest(batch, acks, -1, -1))
                    done = trio.current_time()
                    if _check(reply, run) and sent >= measure_from:
                        run.appends += 1
                        run.records += records_per_batch
                        run.latencies_s.append(done - sent)
                        last_done = max(last_done, done)

            async with trio.open_nursery() as nursery:
                for _ in range(window):
                    nursery.start_soon(worker)
            run.elapsed_s = last_done - measure_from
    return run


async def open_loop(
    address: str,
    batches: Sequence[bytes],
    records_per_batch: int,
    acks: Acks,
    rate_per_s: float,
    duration_s: float,
) -> AppendRun:
    """Appends sent at a fixed arrival rate whatever the answers do; each latency counts
    from the append's scheduled send time, so a stall is not hidden (no coordinated
    omission): an append that waits for the connection's window waits on the clock."""
    run = AppendRun()
    count = max(1, int(rate_per_s * duration_s))
    with trio.fail_after(duration_s + 60.0):
        async with open_connection(address) as conn:

            async def one(i: int, scheduled: float) -> None:
                reply = await conn.request(AppendRequest(batches[i % len(batches)], acks, -1, -1))
                if _check(reply, run):
                    run.appends += 1
                    run.records += records_per_batch
                    run.latencies_s.append(trio.current_time() - scheduled)

            start = trio.current_time() + 0.01
            async with trio.open_nursery() as nursery:
                for i in range(count):
                    scheduled = start + i / rate_per_s
                    await trio.sleep_until(scheduled)
                    nursery.start_soon(one, i, scheduled)
            run.elapsed_s = trio.current_time() - start
    return run


def with_leader(cluster: ProcessCluster, measure: Callable[[str], T], attempts: int = 3) -> T:
    """Run `measure(leader address)`; if leadership moves meanwhile, start over."""
    for attempt in range(attempts):
        try:
            return measure(leader_address(cluster))
        except (LeaderMoved, BaseExceptionGroup) as exc:
            moved = isinstance(exc, LeaderMoved) or exc.subgroup(LeaderMoved) is not None
            if not moved or attempt == attempts - 1:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


# --- status -------------------------------------------------------------------------------


async def status_of(address: str) -> dict | None:
    found = await statuses_of(address, [StatusRequest()])
    return None if found is None else found[0]


async def statuses_of(address: str, requests: Sequence[Message]) -> list[dict] | None:
    """The statuses that `requests` (StatusRequest, PartitionsRequest) are answered with,
    over one connection; None if the node is unreachable or answers something else."""
    replies: list[Message] = []
    try:
        with trio.fail_after(2.0):
            async with open_connection(address) as conn:
                for request in requests:
                    replies.append(await conn.request(request))
    # The connection's nursery wraps what breaks inside it in an ExceptionGroup.
    except* (TransportError, trio.TooSlowError, OSError):
        pass  # too few replies: unreachable
    if len(replies) < len(requests) or not all(isinstance(r, StatusReply) for r in replies):
        return None
    return [r.status for r in replies]


async def wait_all_committed(
    cluster: ProcessCluster, target: int, timeout_s: float = 60.0, poll_s: float = 0.01
) -> float:
    """Seconds until every running node holds and commits `target`."""
    start = time.perf_counter()
    deadline = start + timeout_s
    pending = set(cluster.procs)
    while pending:
        for node_id in sorted(pending):
            status = await status_of(cluster.address(node_id))
            if status and min(status["commit_offset"], status["dirty_offset"]) >= target:
                pending.discard(node_id)
        if not pending:
            break
        if time.perf_counter() > deadline:
            raise AssertionError(f"nodes {sorted(pending)} did not commit {target} in time")
        await trio.sleep(poll_s)
    return time.perf_counter() - start


def closed_loop_drained(
    cluster: ProcessCluster,
    batches: Sequence[bytes],
    records_per_batch: int,
    acks: str,
    window: int,
    duration_s: float,
    warmup_s: float = 0.0,
) -> tuple[AppendRun, float]:
    """One closed-loop case through the leader, then the wait until every node holds and
    commits all of it (so that the next case starts on a quiet cluster): (the run, seconds
    of that wait)."""

    async def measure(address: str) -> tuple[AppendRun, float]:
        result = await closed_loop(
            address,
            batches,
            records_per_batch,
            ACKS[acks],
            window,
            duration_s=duration_s,
            warmup_s=warmup_s,
        )
        status = await status_of(address)
        target = status["dirty_offset"] if status else result.last_offset
        return result, await wait_all_committed(cluster, target)

    return with_leader(cluster, lambda address: trio.run(measure, address))


def closed_loop_row(
    cluster: ProcessCluster,
    record_bytes: int,
    window: int,
    acks: str,
    duration_s: float,
    append_bytes: int = 64 * KIB,
    **what,
) -> dict:
    """`closed_loop_drained` with appends of about `append_bytes` of `record_bytes`
    records: a row of the figures and `what` it was."""
    per_append = max(1, append_bytes // record_bytes)
    batches = make_batches(per_append, count=8, record_bytes=record_bytes)
    result, _ = closed_loop_drained(cluster, batches, per_append, acks, window, duration_s)
    rss = cluster.peak_rss_mb()
    return {
        **what,
        "record_bytes": record_bytes,
        "acks": acks,
        "window": window,
        "nodes": cluster.size,
        "records_s": result.records_s,
        "mb_s": result.records_s * record_bytes / 1e6,
        **latency_fields(result.latencies_s),
        "errors": result.errors,
        "peak_rss_mb_max": max(rss.values(), default=None),
    }


# --- baselines ----------------------------------------------------------------------------


def raw_disk_mb_s(
    directory: str, batch: bytes, total_bytes: int, fsync_every: float, writers: int = 1
) -> float:
    """bench/storage.py's raw loop: write the same batches, fsync every `fsync_every` of
    them; MB/s of batch bytes, median of three runs. With `writers`, that many loops run at
    once, each on a file of its own (the replicas of a cluster on one machine share its
    disk): the MB/s of each, taken from the slowest."""
    count = max(1, total_bytes // len(batch))
    paths = [os.path.join(directory, f"raw-disk-{i}") for i in range(writers)]

    def append(path: str) -> float:
        if os.path.exists(path):
            os.remove(path)
        return _raw_append(path, batch, count, fsync_every)

    seconds = []
    with ThreadPoolExecutor(writers) as pool:  # the loop's writes and fsyncs free the GIL
        for _ in range(3):
            seconds.append(max(pool.map(append, paths)))
    for path in paths:
        os.remove(path)
    return count * len(batch) / MB / sorted(seconds)[1]


async def raw_loopback_mb_s(data: bytes, duration_s: float) -> float:
    """A raw trio socket pair on 127.0.0.1 carrying `data` over and over (sender and
    receiver in this one trio thread, as the client and a node share the cores)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    received = 0
    async with trio.open_nursery() as nursery:
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listeners[0].accept()

        async def receive() -> None:
            nonlocal received
            while chunk := await server.receive_some(1024 * KIB):
                received += len(chunk)

        nursery.start_soon(receive)
        start = time.perf_counter()
        while time.perf_counter() - start < duration_s:
            await client.send_all(data)
        elapsed = time.perf_counter() - start
        counted = received
        nursery.cancel_scope.cancel()
    await client.aclose()
    await server.aclose()
    for listener in listeners:
        await listener.aclose()
    return counted / MB / elapsed
