"""`quorumlog dev`: a local cluster in the foreground, with a live status table.

Each node is a `quorumlog serve` child process with its own data and log file under one
folder. The nodes run in a process group of their own, so that Ctrl-C reaches `dev` alone
and each node gets one SIGTERM from it (flush, close, "stopped" in its log); a second
signal while a node closes would abort it. Before it starts anything, `dev` checks every
port it would use and locks its folder: a second `dev` beside a running one says which port
is taken and by whom, instead of starting nodes that cannot listen.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import click
from rich.console import Console
from rich.live import Live

from quorumlog.cli import portcheck
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.cli.status_command import status_table
from quorumlog.client.errors import QuorumLogError
from quorumlog.server.data_lock import LOCK_FILE, DataDirInUseError, lock_data_dir

REFRESH_S = 1.0


@dataclass(frozen=True, slots=True)
class PlannedPort:
    port: int
    flag: str  # the option that sets it
    node_id: int


def run_dev(
    nodes: int, data_dir: str, base_port: int, kafka_base_port: int, http_base_port: int
) -> None:
    """Runs until Ctrl-C (or SIGTERM, SIGHUP); raises click.ClickException (exit 1) when a
    port is taken, the folder is in use, or a node exits before the cluster is up."""
    bases = {"--base-port": base_port, "--kafka-base-port": kafka_base_port}
    bases["--http-base-port"] = http_base_port
    _check_ports(
        [PlannedPort(base + i, flag, i + 1) for flag, base in bases.items() for i in range(nodes)]
    )
    try:
        lock = lock_data_dir(data_dir)  # held while dev runs; the kernel lets go when it ends
    except DataDirInUseError:
        by = _lock_holder(data_dir)
        raise click.ClickException(
            f"--data {os.path.abspath(data_dir)} is in use by {by}: stop it, or give dev "
            "another --data"
        ) from None
    except OSError as exc:
        raise click.ClickException(f"--data {data_dir}: {exc.strerror or exc}") from None
    try:
        _run(nodes, data_dir, base_port, kafka_base_port, http_base_port)
    finally:
        os.close(lock)


def _lock_holder(data_dir: str) -> str:
    try:
        with open(os.path.join(data_dir, LOCK_FILE)) as f:
            return portcheck.describe(int(f.read().strip()))
    except (OSError, ValueError):
        return "another process"


def _check_ports(planned: list[PlannedPort]) -> None:
    busy = [p for p in planned if portcheck.in_use(p.port)]
    if not busy:
        return
    first = busy[0]
    by = portcheck.holder(first.port)
    more = f" (and {len(busy) - 1} more of its ports)" if len(busy) > 1 else ""
    raise click.ClickException(
        f"port {first.port} ({first.flag}, node {first.node_id}) is in use"
        f"{f' by {by}' if by else ''}{more}: stop it, or give dev other ports "
        "(--base-port, --kafka-base-port, --http-base-port)"
    )


def _run(
    nodes: int, data_dir: str, base_port: int, kafka_base_port: int, http_base_port: int
) -> None:
    # A closed terminal stops the cluster as Ctrl-C does: the nodes, in their own process
    # group, would not hear its SIGHUP. (main() makes SIGTERM do the same.)
    signal.signal(signal.SIGHUP, signal.default_int_handler)
    cluster = ProcessCluster(
        data_dir,
        size=nodes,
        ports=[base_port + i for i in range(nodes)],
        kafka_ports=[kafka_base_port + i for i in range(nodes)],
        http_ports=[http_base_port + i for i in range(nodes)],
        auto_create_topics=True,  # as a Kafka broker's default: trying things out
        http_allow_writes=True,  # the console's produce form: trying things out
        own_process_group=True,
    )
    console = Console()
    try:
        cluster.start_all()
        _fail_on_exit(cluster, set(cluster.ids))
        console.print(
            f"[bold]quorumlog dev[/]: {nodes} nodes, data and logs in "
            f"{os.path.abspath(data_dir)} (a new run there restarts this cluster; "
            "delete that folder to start afresh)\n"
            f"brokers: {cluster.brokers}\n"
            f"web console: http://127.0.0.1:{http_base_port}/ "
            f"(node N at port {http_base_port} + N - 1)\n"
            f"Kafka clients: bootstrap.servers={cluster.kafka_bootstrap} "
            "(topics they name are created)\n"
            f"try:  seq 10 | quorumlog produce -b {cluster.brokers}\n"
            f"      quorumlog consume -b {cluster.brokers} --follow\n"
            "Ctrl-C stops the cluster."
        )
        _watch(cluster, console)
    except KeyboardInterrupt:
        console.print("\nstopping the nodes (Ctrl-C again kills them) ...")
    finally:
        _stop(cluster)


def _watch(cluster: ProcessCluster, console: Console) -> None:
    """The live table, until Ctrl-C. A node that exits before every node has answered once
    ends `dev`; later (a node killed to watch a failover, say) it is reported and the rest
    run on, until none is left."""
    starting = set(cluster.ids)  # nodes that have not answered a status yet
    with (
        cluster.client(timeout=2.0) as client,
        Live(console=console, refresh_per_second=2) as live,
    ):
        while True:
            _fail_on_exit(cluster, starting)
            for node_id, proc in list(cluster.procs.items()):
                if proc.poll() is not None:
                    console.print(_exit_line(cluster, node_id))
                    cluster.procs.pop(node_id)
            if not cluster.procs:
                raise click.ClickException("every node has exited")
            try:
                statuses = client.status()
                live.update(status_table(statuses))
                starting -= {s["node_id"] for s in statuses if "role" in s}
            except QuorumLogError as exc:
                live.update(f"waiting for the cluster: {exc}")
            time.sleep(REFRESH_S)


def _fail_on_exit(cluster: ProcessCluster, starting: set[int]) -> None:
    for node_id in sorted(starting):
        proc = cluster.procs.get(node_id)
        if proc is not None and proc.poll() is not None:
            raise click.ClickException(_exit_line(cluster, node_id))


def _exit_line(cluster: ProcessCluster, node_id: int) -> str:
    """`node N exited with CODE: LOG: its last line`, the line that says why."""
    path = cluster.log_path(node_id)
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f.read().splitlines()[-20:] if line.strip()]
    except OSError:
        lines = []
    last = lines[-1] if lines else "(empty)"
    code = cluster.procs[node_id].returncode
    return f"node {node_id} exited with {code}: {os.path.abspath(path)}: {last}"


def _stop(cluster: ProcessCluster) -> None:
    """SIGTERM to each node (they flush and close); a second Ctrl-C kills them instead."""
    try:
        cluster.stop_all()
    except KeyboardInterrupt:
        cluster.kill_all()
        raise
