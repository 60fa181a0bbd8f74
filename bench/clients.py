"""Appends as a user makes them: through the public clients, not a raw connection.

- `async_run`: `window` trio tasks share one `AsyncClient` (as docs/python.md says to), each
  appending `records_per_call` fresh 1 KiB records as soon as its last call returned.
- `threads_run`: `threads` OS threads share one blocking `Client` the same way.
- `fill_log`: megabytes of incompressible records into `default`, to have a log to copy.

Records are made before the clock starts (random bytes, so compression gains nothing);
everything from the call on (batch encoding, checksums, framing, routing) is counted.
"""

from __future__ import annotations

import os
import threading
import time

import trio

from quorumlog import AsyncClient, Client, QuorumLogError
from quorumlog.bench.resources import CpuMeter
from quorumlog.bench.workload import AppendRun, IncompressibleRecords, latency_fields

RECORD_BYTES = 1024
POOL_RECORDS = 4096  # distinct records cycled through


def record_pool(record_bytes: int = RECORD_BYTES, count: int = POOL_RECORDS) -> list[bytes]:
    data = os.urandom(record_bytes * count)
    return [data[i * record_bytes : (i + 1) * record_bytes] for i in range(count)]


def record_calls(pool: list[bytes], records_per_call: int) -> list[list[bytes]]:
    n = records_per_call
    return [[pool[(i * n + j) % len(pool)] for j in range(n)] for i in range(len(pool) // n or 1)]


async def async_run(
    brokers: str,
    window: int,
    records_per_call: int,
    acks: str,
    duration_s: float,
    warmup_s: float,
    topic: str = "default",
    partition: int = 0,
    meter: CpuMeter | None = None,
) -> AppendRun:
    """Closed loop through one shared AsyncClient; calls started in the warm-up are not
    counted (nor, with a `meter`, the CPU used before the measured interval)."""
    calls = record_calls(record_pool(), records_per_call)
    run = AppendRun()
    issued = 0
    async with AsyncClient(brokers, timeout=30) as client:
        await client.append([b"warm"], topic=topic, partition=partition)  # routes learned
        start = trio.current_time()
        measure_from = start + warmup_s
        end = measure_from + duration_s
        last_done = measure_from

        async def worker() -> None:
            nonlocal issued, last_done
            while (sent := trio.current_time()) < end:
                records = calls[issued % len(calls)]
                issued += 1
                try:
                    await client.append(records, acks=acks, topic=topic, partition=partition)
                except QuorumLogError:
                    run.errors += 1
                    continue
                done = trio.current_time()
                if sent >= measure_from:
                    run.appends += 1
                    run.records += len(records)
                    run.latencies_s.append(done - sent)
                    last_done = max(last_done, done)

        cpu_from: tuple[float, float] | None = None

        async def read_cpu_at_start() -> None:
            nonlocal cpu_from
            await trio.sleep_until(measure_from)
            cpu_from = meter.read()

        async with trio.open_nursery() as nursery:
            if meter is not None:
                nursery.start_soon(read_cpu_at_start)
            for _ in range(window):
                nursery.start_soon(worker)
        if meter is not None and cpu_from is not None:
            run.server_cpu_s, run.client_cpu_s = meter.since(cpu_from)
        run.elapsed_s = last_done - measure_from
    return run


def threads_run(
    brokers: str,
    threads: int,
    records_per_call: int,
    acks: str,
    duration_s: float,
    warmup_s: float,
    topic: str = "default",
    partition: int = 0,
) -> AppendRun:
    """Closed loop of `threads` threads through one shared blocking Client."""
    calls = record_calls(record_pool(), records_per_call)
    run = AppendRun()
    lock = threading.Lock()
    counter = iter(range(1 << 62))
    with Client(brokers, timeout=30) as client:
        client.append([b"warm"], topic=topic, partition=partition)
        start = time.monotonic()
        measure_from = start + warmup_s
        end = measure_from + duration_s
        last_done = [measure_from]

        def worker() -> None:
            while (sent := time.monotonic()) < end:
                records = calls[next(counter) % len(calls)]
                try:
                    client.append(records, acks=acks, topic=topic, partition=partition)
                except QuorumLogError:
                    with lock:
                        run.errors += 1
                    continue
                done = time.monotonic()
                if sent >= measure_from:
                    with lock:
                        run.appends += 1
                        run.records += len(records)
                        run.latencies_s.append(done - sent)
                        last_done[0] = max(last_done[0], done)

        pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        run.elapsed_s = last_done[0] - measure_from
    return run


def client_rows(brokers: str, duration_s: float, warmup_s: float) -> list[dict]:
    """The rows a user feels, 1 KiB records: single-record calls with 64 and 1 in flight
    (acks quorum and leader), 64-record calls with 64 in flight, and the blocking Client
    shared by 64 threads and used by one (each with its ratio to the AsyncClient's row of
    the same window)."""
    cases = [
        ("AsyncClient", 64, 1, "quorum"),
        ("AsyncClient", 64, 1, "leader"),
        ("AsyncClient", 1, 1, "quorum"),
        ("AsyncClient", 1, 1, "leader"),
        ("AsyncClient", 64, 64, "quorum"),
        ("Client", 64, 1, "quorum"),
        ("Client", 1, 1, "quorum"),
    ]
    rows = []
    for kind, window, per_call, acks in cases:
        if kind == "AsyncClient":
            run = trio.run(async_run, brokers, window, per_call, acks, duration_s, warmup_s)
            inflight = f"w{window}"
        else:
            run = threads_run(brokers, window, per_call, acks, duration_s, warmup_s)
            inflight = f"{window} thread{'s' if window > 1 else ''}"
        rows.append(
            {
                "figure": f"client: {kind} {per_call} rec/call {inflight} {acks}",
                "client": kind,
                "acks": acks,
                "window": window,
                "records_per_append": per_call,
                "records_s": run.records_s,
                "mb_s": run.mb_s,
                **latency_fields(run.latencies_s),
                "errors": run.errors,
            }
        )
    for row in rows:
        if row["client"] == "Client":
            same = next(
                r
                for r in rows
                if r["client"] == "AsyncClient"
                and (r["window"], r["acks"], r["records_per_append"])
                == (row["window"], row["acks"], row["records_per_append"])
            )
            row["ratio_to_async"] = (
                row["records_s"] / same["records_s"] if same["records_s"] else 0.0
            )
    return rows


FILL_RECORD_BYTES = 16 * 1024


def fill_log(brokers: str, megabytes: int) -> float:
    """Append about `megabytes` of incompressible records to `default` through the public
    `Client`, 64 records per call; returns the seconds it took."""
    records = IncompressibleRecords(FILL_RECORD_BYTES)
    start = time.monotonic()
    with Client(brokers, timeout=60) as c:
        for _ in range(megabytes * 1_000_000 // (64 * FILL_RECORD_BYTES) + 1):
            c.append(records.take(64))
    return time.monotonic() - start
