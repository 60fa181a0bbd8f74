"""`quorumlog bench consume`: consumer groups through the public clients, beside plain
`read` loops on the same data in the same run.

- stream mode, 1, 3 and 6 members (each an AsyncConsumer polling and committing after every
  poll) draining a 6-partition topic, against 6 plain readers (an AsyncClient.read loop per
  partition); timed from when every member consumes its partitions;
- a member's SIGKILL until its partitions are consumed again by the survivor (the
  target: at most the session timeout + 1 s);
- queue mode (bench/consume_queue.py);
- `quorumlog consume` of a partition of small lines (1M; 20,000 --tiny) to /dev/null,
  against an AsyncClient.read loop over the same records (the target: x0.8);
- one consumer of 1,000 partitions (512 KB each; 256 KB --quick) polling slowly: how much
  its memory grows against its read-ahead bound (`buffer_bytes`, 64 MiB by default).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from statistics import median

import trio

from quorumlog import AsyncClient, AsyncConsumer, Record
from quorumlog.bench.consume_queue import queue_rows
from quorumlog.bench.report import print_table
from quorumlog.bench.workload import IncompressibleRecords, running_cluster
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from quorumlog.client.fetcher import BUFFER_BYTES

TOPIC = "bench-consume"
PARTITIONS = 6
RECORD_BYTES = 256
APPEND_RECORDS = 500
POLL_RECORDS = 1000
MEMBER_COUNTS = (1, 3, 6)
SESSION_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Sizes:
    records_per_partition: int
    rounds: int
    kills: int
    queue_records: int
    latency_s: float

    cli_records: int
    wide_partitions: int
    wide_records: int  # per partition
    wide_poll_s: float = 10.0  # how long the wide consumer polls


FULL = Sizes(100_000, 3, 5, 50_000, 20.0, 1_000_000, wide_partitions=1000, wide_records=2000)
QUICK = Sizes(50_000, 2, 2, 20_000, 8.0, 1_000_000, wide_partitions=1000, wide_records=1000)
TINY = Sizes(1_000, 1, 1, 1_000, 1.0, 20_000, wide_partitions=20, wide_records=500, wide_poll_s=2)


async def fill(brokers: str, topic: str, partitions: int, per_partition: int) -> None:
    source = IncompressibleRecords(RECORD_BYTES, seed=7)
    async with AsyncClient(brokers, timeout=60) as c:
        await c.create_topic(topic, partitions=partitions, replicas=3)
        for p in range(partitions):
            for _ in range(0, per_partition, APPEND_RECORDS):
                await c.append(source.take(APPEND_RECORDS), topic=topic, partition=p)


async def _plain_readers(brokers: str, total: int) -> float:
    """Records/s of one `read` loop per partition, all at once."""
    done = 0

    async def reader(c: AsyncClient, p: int, last: int) -> None:
        nonlocal done
        offset = 0
        while offset <= last:  # an empty read may be a new leader's before its barrier
            records, offset = await c.read_on(offset, POLL_RECORDS, TOPIC, p)
            done += len(records)

    async with AsyncClient(brokers, timeout=60) as c:
        ends = [await c.end_offset(True, TOPIC, p) for p in range(PARTITIONS)]
        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for p in range(PARTITIONS):
                nursery.start_soon(reader, c, p, ends[p])
    assert done == total, (done, total)
    return total / (trio.current_time() - started)


async def stream_group(
    brokers: str,
    group: str,
    members: int,
    total: int,
    topic: str = TOPIC,
    partitions: int = PARTITIONS,
) -> float:
    """Records/s of `members` consumers of one new group, polling and committing."""
    async with contextlib.AsyncExitStack() as stack:
        consumers = [
            await stack.enter_async_context(
                AsyncConsumer(brokers, group, [topic], session_timeout=10.0, timeout=60)
            )
            for _ in range(members)
        ]
        share = partitions // members
        while True:  # every member consumes its share: the rebalances are over
            counts = [len(await c.assignment()) for c in consumers]
            if sum(counts) == partitions and min(counts) >= share:
                break
            await trio.sleep(0.05)
        done = 0
        started = trio.current_time()

        async def member(c: AsyncConsumer) -> None:
            nonlocal done
            while done < total:
                records = await c.poll(POLL_RECORDS, 0.05)
                done += len(records)
                await c.commit()

        async with trio.open_nursery() as nursery:
            for c in consumers:
                nursery.start_soon(member, c)
        assert done == total, (done, total)
        return total / (trio.current_time() - started)


def _stream_rows(cluster: ProcessCluster, sizes: Sizes) -> list[dict]:
    total = PARTITIONS * sizes.records_per_partition
    trio.run(fill, cluster.brokers, TOPIC, PARTITIONS, sizes.records_per_partition)
    plain: list[float] = []
    group: dict[int, list[float]] = {n: [] for n in MEMBER_COUNTS}
    for r in range(sizes.rounds):
        plain.append(trio.run(_plain_readers, cluster.brokers, total))
        for n in MEMBER_COUNTS:
            group[n].append(trio.run(stream_group, cluster.brokers, f"bench-{r}-{n}", n, total))
    base = median(plain)
    rows = [
        {
            "figure": f"{PARTITIONS} plain readers (read loops), {PARTITIONS} partitions",
            "records_s": round(base),
            "runs": [round(x) for x in plain],
        }
    ]
    for n in MEMBER_COUNTS:
        rate = median(group[n])
        rows.append(
            {
                "figure": f"stream mode, {n} members, {PARTITIONS} partitions, commit per poll",
                "records_s": round(rate),
                "x_plain_readers": round(rate / base, 2),
                "runs": [round(x) for x in group[n]],
            }
        )
    return rows


MEMBER_SCRIPT = """
import sys
from quorumlog import Consumer
with Consumer(sys.argv[1], sys.argv[2], [sys.argv[3]], session_timeout=float(sys.argv[4])) as c:
    while True:
        c.poll(1000, 0.1)
        c.commit()
        print(len(c.assignment()), flush=True)
"""


async def _takeover_s(brokers: str, group: str) -> float:
    """One kill: a member in a process of its own and one here share the topic; a producer
    keeps appending to every partition. Seconds from the SIGKILL of the other until this
    member reads a record of a partition the other consumed."""
    args = [brokers, group, TOPIC, str(SESSION_TIMEOUT_S)]
    other = subprocess.Popen(
        [sys.executable, "-c", MEMBER_SCRIPT, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        async with (
            AsyncClient(brokers, timeout=30) as producer,
            AsyncConsumer(brokers, group, [TOPIC], session_timeout=SESSION_TIMEOUT_S) as me,
        ):
            stop = trio.Event()

            async def produce() -> None:
                while not stop.is_set():
                    for p in range(PARTITIONS):
                        await producer.append([Record(b"tick")], topic=TOPIC, partition=p)
                    await trio.sleep(0.02)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(produce)
                while len(await me.assignment()) != PARTITIONS // 2:
                    await me.poll(POLL_RECORDS, 0.05)
                while (line := await trio.to_thread.run_sync(other.stdout.readline)) != (
                    f"{PARTITIONS // 2}\n"
                ):
                    if not line:
                        raise RuntimeError("the other member's process ended")
                theirs = {(TOPIC, p) for p in range(PARTITIONS)} - set(await me.assignment())
                other.send_signal(signal.SIGKILL)
                killed = trio.current_time()
                while True:
                    records = await me.poll(POLL_RECORDS, 0.05)
                    await me.commit()
                    if any((r.topic, r.partition) in theirs for r in records):
                        took = trio.current_time() - killed
                        break
                stop.set()
        return took
    finally:
        other.kill()
        other.wait()


def _takeover_rows(cluster: ProcessCluster, kills: int) -> list[dict]:
    samples = [trio.run(_takeover_s, cluster.brokers, f"takeover-{i}") for i in range(kills)]
    return [
        {
            "figure": f"member SIGKILL until its partitions are consumed again, "
            f"session {SESSION_TIMEOUT_S:g} s",
            "median_s": round(median(samples), 2),
            "over_session_s": round(median(samples) - SESSION_TIMEOUT_S, 2),
            "runs": [round(s, 2) for s in samples],
        }
    ]


async def _read_all(brokers: str, topic: str, max_records: int = 1_000_000) -> int:
    done, offset = 0, 0
    async with AsyncClient(brokers, timeout=60) as c:
        while records := await c.read(offset, max_records, topic=topic):
            done += len(records)
            offset = records[-1].offset + 1
    return done


def _cli_row(cluster: ProcessCluster, records: int, rounds: int) -> dict:
    """`consume` of small lines to /dev/null beside a read loop, the two in turn."""
    lines = b"".join(b"line-%d\n" % i for i in range(records))
    produce = [*QUORUMLOG, "produce", "-b", cluster.brokers, "--topic", "lines"]
    with cluster.client(timeout=60) as c:
        c.create_topic("lines", partitions=1, replicas=3)
    subprocess.run(produce, input=lines, check=True, capture_output=True)
    consume = [*QUORUMLOG, "consume", "-b", cluster.brokers, "--topic", "lines"]
    cli, loop, default_loop = [], [], []
    for _ in range(rounds):
        started = time.monotonic()
        subprocess.run(consume, check=True, stdout=subprocess.DEVNULL)
        cli.append(records / (time.monotonic() - started))
        started = time.monotonic()
        assert trio.run(_read_all, cluster.brokers, "lines") == records
        loop.append(records / (time.monotonic() - started))
        # A loop as a user writes it: `read(offset)`, 1,000 records a call.
        started = time.monotonic()
        assert trio.run(_read_all, cluster.brokers, "lines", 1_000) == records
        default_loop.append(records / (time.monotonic() - started))
    return {
        "figure": f"quorumlog consume > /dev/null, {records:,} small lines (process start included)",
        "records_s": round(median(cli)),
        "read_loop_records_s": round(median(loop)),
        "read_loop_1000_a_call_records_s": round(median(default_loop)),
        "x_read_loop": round(median(cli) / median(loop), 2),
        "target_x": 0.8,
    }


def _wide_row(cluster: ProcessCluster, sizes: Sizes) -> dict:
    """One consumer of many partitions polling slowly, in a process of its own: how much
    its memory grew, against its read-ahead bound (quorumlog/client/fetcher.py)."""
    partitions = sizes.wide_partitions
    trio.run(fill, cluster.brokers, "wide", partitions, sizes.wide_records)
    args = [sys.executable, "-m", "quorumlog.bench.consumer_memory", cluster.brokers, "wide"]
    args += [str(BUFFER_BYTES), str(sizes.wide_poll_s)]
    out = subprocess.run(args, capture_output=True, check=True)
    polled, grown = map(int, out.stdout.split())
    return {
        "figure": f"one consumer of {partitions:,} partitions, polling slowly "
        f"for {sizes.wide_poll_s:g} s",
        "topic_mb": round(partitions * sizes.wide_records * RECORD_BYTES / 1e6),
        "rss_grown_mb": round(grown / 1e6, 1),
        "buffer_bytes_mb": round(BUFFER_BYTES / 1e6, 1),
        "records_polled": polled,
    }


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    with running_cluster("consume") as cluster:
        started = time.monotonic()
        rows = _stream_rows(cluster, sizes)
        rows += _takeover_rows(cluster, sizes.kills)
        rows += queue_rows(cluster, sizes.queue_records, sizes.rounds, sizes.latency_s)
        rows.append(_cli_row(cluster, sizes.cli_records, sizes.rounds))
        rows.append(_wide_row(cluster, sizes))
        rows.append({"figure": "scenario wall time", "s": round(time.monotonic() - started, 1)})
    return rows


if __name__ == "__main__":
    print_table("bench consume", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
