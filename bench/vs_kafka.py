"""`quorumlog bench vs-kafka`: Apache Kafka 4.4 with three replicas beside quorumlog's Kafka
listener, the same confluent-kafka workloads in the same run on the same machine.

Kafka: three KRaft processes, broker and controller each (bench/kafka_java.py: 512 MiB
heap, replication 3, min.insync.replicas=2), fetched from Maven Central on first use.
quorumlog: three nodes with Kafka listeners. Each gets a topic of one partition of three
replicas and the closed loops of `bench kafka` (bench/kafka_producer.py: acks=all,
linger.ms=0, no idempotence, 1 and 64 single records in flight; librdkafka's defaults
with idempotence, 64 calls of 64 records in flight), 1 KiB random records.

Kafka is measured twice, as it ships (acknowledged once in the replicas' page cache,
fsynced when the OS flushes) and with an fsync of every append on each replica, as
quorumlog's acks=quorum has it: the second topic has `flush.messages=1`, the topic's
override of the broker's `log.flush.interval.messages=1`, so one cluster serves both.
Every cluster runs all along (an idle one costs a little CPU); after an uncounted pass
of every case on every system (the JVMs compile Kafka's produce path meanwhile), each
case runs on each system right after the other in every round (bench/rounds.py). Each row
has the servers' CPU per record (/proc), and quorumlog's rows their ratios to both
Kafka rows: records/s, and CPU per record to Kafka's as it ships.

Without java 17+, or without the jars and mvn to fetch them, the scenario prints one
line saying why and measures nothing.
"""

from __future__ import annotations

import shutil
import sys
import tempfile

from quorumlog.bench import kafka_java
from quorumlog.bench.kafka import CASES
from quorumlog.bench.kafka_producer import kafka_run
from quorumlog.bench.report import print_table
from quorumlog.bench.resources import CpuMeter
from quorumlog.bench.rounds import paired_ratio, round_fields
from quorumlog.bench.workload import running_cluster

FULL_S, QUICK_S, TINY_S = 5.0, 1.5, 0.5
FULL_ROUNDS = 3  # each figure is the median of this many rounds (one with --quick)
# Before the rounds, every case once on every system, uncounted, this long each: the
# brokers' JIT compiles the produce path (a first full run without it rose round after
# round on Kafka, x3.6-x7.5 from the first to the third).
WARM_UP_S = {"full": 2.0, "quick": 0.5, "tiny": 0.2}
# --tiny measures nothing (the suite's smoke test): brokers that start sooner, with the
# JVM's quick compiler only and 3 partitions of consumer offsets, not 50.
SMOKE_BROKERS = {
    "extra": {"offsets.topic.num.partitions": "3"},
    "jvm": (*kafka_java.BROKER_JVM, "-XX:TieredStopAtLevel=1"),
}
TOPIC = "bench"
KAFKA = "Kafka 4.4"
KAFKA_FSYNC = "Kafka 4.4 flush.messages=1"
QUORUMLOG = "quorumlog"
# (system, its topic's configs): the Kafka rows first, quorumlog's compared with them.
SYSTEMS = ((KAFKA, {}), (KAFKA_FSYNC, {"flush.messages": "1"}), (QUORUMLOG, {}))


def _create_topic(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=1, replication_factor=3, config=configs)
    admin.create_topics([new], operation_timeout=60)[topic].result(timeout=60)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    why = kafka_java.why_unavailable()
    if why is not None:
        print(f"bench vs-kafka: skipped: {why}", file=sys.stderr)
        return [{"figure": "vs-kafka skipped", "skipped": True, "reason": why}]
    size = "tiny" if tiny else "quick" if quick else "full"
    duration_s = {"tiny": TINY_S, "quick": QUICK_S, "full": FULL_S}[size]
    rounds = FULL_ROUNDS if size == "full" else 1
    passes = [(WARM_UP_S[size], False)] + [(duration_s, True)] * rounds  # (seconds, counted)
    runs: dict[tuple[str, int], list] = {}
    root = tempfile.mkdtemp(prefix="quorumlog-bench-vs-kafka-")
    try:
        with (
            kafka_java.KafkaBrokers(root, **(SMOKE_BROKERS if size == "tiny" else {})) as brokers,
            running_cluster("vs-kafka", kafka=True) as cluster,
        ):
            kafka_meter = CpuMeter(tuple(proc.pid for proc in brokers.procs.values()))
            our_meter = CpuMeter(tuple(proc.pid for proc in cluster.procs.values()))
            targets = {}  # system -> (bootstrap, topic, meter)
            for system, configs in SYSTEMS:
                ours = system == QUORUMLOG
                bootstrap = cluster.kafka_bootstrap if ours else brokers.bootstrap
                topic = f"{TOPIC}-{len(targets)}"
                _create_topic(bootstrap, topic, configs)
                targets[system] = (bootstrap, topic, our_meter if ours else kafka_meter)
            for seconds, counted in passes:
                for case, (_name, settings, window, per_call) in enumerate(CASES):
                    for system, (bootstrap, topic, meter) in targets.items():
                        measured = kafka_run(
                            bootstrap,
                            topic,
                            window,
                            per_call,
                            settings,
                            seconds,
                            seconds / 5,
                            meter,
                        )
                        if counted:
                            runs.setdefault((system, case), []).append(measured)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = []
    for case, (name, _settings, window, per_call) in enumerate(CASES):
        by_system = {}
        for system, _configs in SYSTEMS:
            row = {"figure": f"{system} {name} w{window} x{per_call}", "system": system}
            row.update(window=window, records_per_call=per_call)
            row.update(round_fields(runs[system, case]))
            by_system[system] = row
            rows.append(row)
        ours = by_system[QUORUMLOG]
        paired_ratio(ours, by_system[KAFKA], "vs_kafka")
        paired_ratio(ours, by_system[KAFKA_FSYNC], "vs_kafka_fsync")
        paired_ratio(ours, by_system[KAFKA], "cpu_vs_kafka", field="server_cpu_us_per_record")
    return rows


if __name__ == "__main__":
    print_table("bench vs-kafka", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
