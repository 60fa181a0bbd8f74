"""Prometheus metrics of one node, served at `/metrics` of its HTTP listener
(quorumlog/console/): read on the node's own trio loop at each scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol, runtime_checkable

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from quorumlog.actors.coordinator.coordinator import Coordinator
from quorumlog.actors.replica.actor import ReplicaActor
from quorumlog.actors.services.cleaner import LogCleaner
from quorumlog.actors.services.disk_health import DiskHealth
from quorumlog.actors.services.stats import Histogram, NodeStats

ROLES = ("leader", "follower", "candidate", "learner")


def _histogram(name: str, doc: str, label: str | None, series: dict[str, Histogram]):
    family = HistogramMetricFamily(name, doc, labels=[label] if label else None)
    for key, h in series.items():
        family.add_metric([key] if label else [], h.cumulative(), h.total)
    return family


@runtime_checkable
class MeasuredNode(Protocol):
    """What the metrics read of a node (a `Node` is one)."""

    stats: NodeStats
    disk_health: DiskHealth
    coordinator: Coordinator  # the lag of the consumer groups it coordinates
    default_group: ReplicaActor
    partitions: Mapping[tuple[str, int], ReplicaActor]
    cleaner: LogCleaner  # what it did to the compacted logs here
    wall_clock_ms: Callable[[], int]


class NodeCollector:
    def __init__(self, node: MeasuredNode) -> None:
        self.node = node

    def collect(self) -> Iterator:
        return iter(snapshot(self.node))


def metrics_exporter(node: MeasuredNode) -> Callable[[], bytes]:
    """The node's metrics in Prometheus' text format, as of each call."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node))
    return lambda: generate_latest(registry)


def snapshot(node: MeasuredNode) -> list:
    group, stats = node.default_group, node.stats
    view = group.view
    status = group.replica_status()  # record offsets, as readers count
    out = []
    role = GaugeMetricFamily("quorumlog_role", "1 for the node's current role", labels=["role"])
    for name in ROLES:
        role.add_metric([name], 1.0 if view.role.label == name else 0.0)
    out.append(role)
    out.append(GaugeMetricFamily("quorumlog_term", "Current Raft term", value=view.term))
    for name, value in (
        ("commit", status["commit_offset"]),
        ("dirty", status["dirty_offset"]),
        ("flushed", status["flushed_offset"]),
        ("log_start", status["log_start_offset"]),
    ):
        out.append(GaugeMetricFamily(f"quorumlog_{name}_offset", f"The {name} offset", value=value))
    lag = GaugeMetricFamily(
        "quorumlog_follower_lag_records",
        "Leader dirty offset minus follower match",
        labels=["peer"],
    )
    for peer, p in status.get("followers", {}).items():
        lag.add_metric([peer], status["dirty_offset"] - p["match"])
    out.append(lag)
    group_lag = GaugeMetricFamily(
        "quorumlog_group_lag_records",
        "Records a consumer group has still to consume (end minus committed position), for "
        "the groups this node coordinates",
        labels=["group", "topic", "partition"],
    )
    for row in node.coordinator.lag_rows():
        if row["lag"] is not None:
            group_lag.add_metric([row["group"], row["topic"], str(row["partition"])], row["lag"])
    out.append(group_lag)
    appends = CounterMetricFamily("quorumlog_appends", "Client appends answered", labels=["acks"])
    sizes = CounterMetricFamily(
        "quorumlog_append_bytes", "Bytes of client appends", labels=["acks"]
    )
    for acks, n in stats.appends.items():
        appends.add_metric([acks], n)
        sizes.add_metric([acks], stats.append_bytes[acks])
    out += [appends, sizes]
    out.append(
        _histogram(
            "quorumlog_append_latency_seconds", "Append latency", "acks", stats.append_latency_s
        )
    )
    out.append(
        _histogram(
            "quorumlog_fsync_latency_seconds",
            "Log fsync latency",
            None,
            {"": stats.fsync_latency_s},
        )
    )
    disk_latency = GaugeMetricFamily(
        "quorumlog_disk_fsync_recent_seconds",
        "Recent fsync latency (smoothed) of this node and of the peers it heard from",
        labels=["node"],
    )
    disk_slow = GaugeMetricFamily(
        "quorumlog_disk_slow",
        "1 for a node whose disk is slow beside the others', or was lately",
        labels=["node"],
    )
    for node_id, disk in node.disk_health.to_json(trio.current_time()).items():
        disk_latency.add_metric([node_id], disk["fsync_ms"] / 1000)
        disk_slow.add_metric([node_id], 1.0 if disk["slow_disk"] else 0.0)
    out += [disk_latency, disk_slow]
    out.append(
        CounterMetricFamily(
            "quorumlog_recovery_bytes",
            "Bytes streamed to recovering followers",
            value=view.recovery_bytes_sent,
        )
    )
    out.append(
        CounterMetricFamily(
            "quorumlog_elections", "Elections this node started", value=view.elections_started
        )
    )
    groups = list(node.partitions.values())
    for name, doc, value in (
        ("partitions_hosted", "Partition replicas on this node", len(groups)),
        ("partitions_led", "Partitions this node leads", sum(g.view.is_leader for g in groups)),
        (
            "partitions_quiet",
            "Idle partition replicas running no timers",
            sum(g.view.quiet for g in groups),
        ),
    ):
        out.append(GaugeMetricFamily(f"quorumlog_{name}", doc, value=value))
    out += _cleaner_metrics(node)
    out.append(
        CounterMetricFamily(
            "quorumlog_heartbeat_messages",
            "Heartbeat batches sent (one per peer per interval, every group in it)",
            value=stats.heartbeats_sent,
        )
    )
    return out


def _cleaner_metrics(node: MeasuredNode) -> list:
    """The cleaner's work since the node started, and how far behind it is: the age of the
    newest record of the oldest closed segment it has not cleaned, over the compacted logs
    here (0 when none waits)."""
    stats = node.cleaner.stats
    out = [
        CounterMetricFamily(f"quorumlog_cleaner_{name}", doc, value=value)
        for name, doc, value in (
            ("passes", "Passes of the log cleaner", stats.passes),
            ("read_bytes", "Bytes of segments the cleaner read", stats.bytes_read),
            ("written_bytes", "Bytes of segments the cleaner wrote", stats.bytes_written),
            ("reclaimed_bytes", "Bytes the cleaner's passes freed", stats.bytes_reclaimed),
            ("removed_records", "Records the cleaner removed", stats.records_removed),
        )
    ]
    now_ms = node.wall_clock_ms()
    waiting = [
        since
        for g in node.partitions.values()
        if g.log.config.compacts and (since := g.log.dirty_since_ms()) is not None
    ]
    behind_s = max((now_ms - since for since in waiting), default=0) / 1000
    out.append(
        GaugeMetricFamily(
            "quorumlog_cleaner_behind_seconds",
            "Age of the oldest closed segment's records a compacted log has not had cleaned",
            value=max(behind_s, 0.0),
        )
    )
    return out
