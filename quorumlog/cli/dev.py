"""`quorumlog dev`: a local cluster in the foreground, with a live status table.

Each node is a `quorumlog serve` child process with its own data and log file under one
folder; Ctrl-C stops them all cleanly (SIGTERM: flush and close).
"""

from __future__ import annotations

import os
import time

from rich.console import Console
from rich.live import Live

from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.cli.status_command import status_table
from quorumlog.client.errors import QuorumLogError

REFRESH_S = 1.0


def run_dev(
    nodes: int, data_dir: str, base_port: int, kafka_base_port: int, http_base_port: int
) -> None:
    os.makedirs(data_dir, exist_ok=True)
    cluster = ProcessCluster(
        data_dir,
        size=nodes,
        ports=[base_port + i for i in range(nodes)],
        kafka_ports=[kafka_base_port + i for i in range(nodes)],
        http_ports=[http_base_port + i for i in range(nodes)],
        auto_create_topics=True,  # as a Kafka broker's default: trying things out
        http_allow_writes=True,  # the console's produce form: trying things out
    )
    console = Console()
    cluster.start_all()
    console.print(
        f"[bold]quorumlog dev[/]: {nodes} nodes, data and logs in {os.path.abspath(data_dir)}\n"
        f"brokers: {cluster.brokers}\n"
        f"web console: http://127.0.0.1:{http_base_port}/ (node N at port {http_base_port} + N - 1)\n"
        f"Kafka clients: bootstrap.servers={cluster.kafka_bootstrap} "
        "(topics they name are created)\n"
        f"try:  seq 10 | quorumlog produce -b {cluster.brokers}\n"
        f"      quorumlog consume -b {cluster.brokers} --follow\n"
        "Ctrl-C stops the cluster."
    )
    try:
        with (
            cluster.client(timeout=2.0) as client,
            Live(console=console, refresh_per_second=2) as live,
        ):
            while True:
                for node_id, proc in list(cluster.procs.items()):
                    if proc.poll() is not None:
                        console.print(f"node {node_id} exited with {proc.returncode}: see its log")
                        cluster.procs.pop(node_id)
                try:
                    live.update(status_table(client.status()))
                except QuorumLogError as exc:
                    live.update(f"waiting for the cluster: {exc}")
                time.sleep(REFRESH_S)
    except KeyboardInterrupt:
        console.print("stopping ...")
    finally:
        cluster.stop_all()
