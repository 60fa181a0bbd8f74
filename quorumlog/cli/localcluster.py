"""A cluster of real `quorumlog serve` processes on 127.0.0.1: for `dev`, `demo`, the
benchmarks and the process tests."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError

QUORUMLOG = [sys.executable, "-m", "quorumlog.cli.main"]


def free_ports(count: int) -> list[int]:
    """Ports free now on 127.0.0.1 for nodes started later, distinct within this process.

    Taken below the kernel's range of ephemeral ports: a port from that range (what binding
    port 0 gives) can be taken by any outgoing connection before the node binds it, which
    made a test cluster fail now and then with "Address already in use".

    QUORUMLOG_PORTS=LOW-HIGH narrows the choice to a band: pickers running side by side (the
    suite's workers) each take their own, since a port one of them handed out is free again
    while its node restarts, and another could pick it then."""
    low, high = port_band()
    ports: list[int] = []
    while len(ports) < count:
        port = _pick.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        ports.append(port)
    return ports


_PORTS_FROM = 10_000
_pick = random.Random()  # not the simulation's: ports need no replay
_handed_out: set[int] = set()


def port_band() -> tuple[int, int]:
    """The ports `free_ports` picks from: [low, high)."""
    band = os.environ.get("QUORUMLOG_PORTS")
    if band:
        low, _, high = band.partition("-")
        return int(low), int(high)
    return _PORTS_FROM, _ephemeral_low() - 1


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return max(low, _PORTS_FROM + 1000)


@dataclass
class ProcessCluster:
    root: str
    size: int = 3
    config_file: str | None = None
    ports: list[int] = field(default_factory=list)
    # Where each node listens, when a proxy owns `ports` (bench/proxy.py); else `ports`.
    listen_ports: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # extra environment of every node
    kafka_ports: list[int] = field(default_factory=list)  # each node's Kafka listener, if any
    auto_create_topics: bool = False  # Kafka clients create the topics they name (`dev`)
    http_ports: list[int] = field(default_factory=list)  # each node's console, if any
    http_allow_writes: bool = False  # the console's produce form (`dev`)
    # Nodes in a process group of their own, out of reach of the terminal's Ctrl-C: `dev`
    # stops them itself, with one signal each.
    own_process_group: bool = False
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ports:
            self.ports = free_ports(self.size)
        if not self.listen_ports:
            self.listen_ports = self.ports

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports[node_id - 1]}"

    @property
    def brokers(self) -> str:
        return ",".join(self.address(i) for i in self.ids)

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.kafka_ports)

    def data_dir(self, node_id: int) -> str:
        return os.path.join(self.root, f"node{node_id}")

    def log_path(self, node_id: int) -> str:
        return os.path.join(self.root, f"node{node_id}.log")

    def start(
        self,
        node_id: int,
        extra: list[str] | None = None,
        join: bool = False,
        wrapper: list[str] | None = None,
    ) -> subprocess.Popen:
        """Start a node; `join=True` starts one outside the configuration (`serve --join`);
        `wrapper` is a command line that runs it (strace, say)."""
        listen = f"127.0.0.1:{self.listen_ports[node_id - 1]}"
        args = [*(wrapper or []), *QUORUMLOG, "serve", "--id", str(node_id)]
        args += ["--data", self.data_dir(node_id)]
        args += ["--listen", listen]
        if join:
            args.append("--join")
        else:
            args += ["--peers", ",".join(f"{i}={self.address(i)}" for i in self.ids)]
        if self.config_file:
            args += ["--config", self.config_file]
        if self.kafka_ports:
            args += ["--kafka-listen", f"127.0.0.1:{self.kafka_ports[node_id - 1]}"]
        if self.auto_create_topics:
            args.append("--auto-create-topics")
        if self.http_ports:
            args += ["--http-listen", f"127.0.0.1:{self.http_ports[node_id - 1]}"]
        if self.http_allow_writes:
            args.append("--http-allow-writes")
        log = open(self.log_path(node_id), "ab")  # noqa: SIM115
        env = {**os.environ, **self.env} if self.env else None
        proc = subprocess.Popen(
            args + (extra or []),
            stdout=log,
            stderr=log,
            env=env,
            process_group=0 if self.own_process_group else None,
        )
        self.procs[node_id] = proc
        return proc

    def start_joiner(self, node_id: int) -> str:
        """Start a node outside the configuration (`serve --join`) on a port of its own,
        for a membership change to add; returns its address."""
        assert self.listen_ports is self.ports, "joiners listen where they are reached"
        while len(self.ports) < node_id:
            self.ports += free_ports(1)
        self.start(node_id, join=True)
        return self.address(node_id)

    def start_all(self, listening_within_s: float = 60.0) -> None:
        """Start every node and wait until each listens (or has exited): a client gives up
        at once when no broker listens, and a loaded machine starts Python slowly."""
        for i in self.ids:
            self.start(i)
        self.wait_listening(listening_within_s)

    def wait_listening(self, within_s: float = 60.0) -> None:
        """Until every started node listens (or has exited)."""
        deadline = time.monotonic() + within_s
        for i in self.procs:
            ports = [self.listen_ports[i - 1], *self.http_ports[i - 1 : i]]
            for port in ports:  # the console listens once the node runs
                while self.procs[i].poll() is None and time.monotonic() < deadline:
                    try:
                        socket.create_connection(("127.0.0.1", port), 1).close()
                        break
                    except OSError:
                        time.sleep(0.05)

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(node_id)
        proc.send_signal(sig)
        proc.wait(timeout=20)

    def stop_all(self) -> None:
        for node_id in list(self.procs):
            proc = self.procs[node_id]
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def kill_all(self) -> None:
        """SIGKILL every node: loses nothing acknowledged with acks=quorum."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.procs.clear()

    def peak_rss_mb(self) -> dict[int, float]:
        """Peak resident memory (VmHWM) of each running node, in MB."""
        out = {}
        for node_id, proc in sorted(self.procs.items()):
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
            except (OSError, StopIteration):
                continue
            out[node_id] = kb / 1024
        return out

    def client(self, timeout: float = 10.0, node_id: int | None = None) -> Client:
        if node_id is not None:
            return Client(self.address(node_id), timeout=timeout, direct=True)
        return Client(self.brokers, timeout=timeout)

    def node_status(self, node_id: int) -> dict | None:
        try:
            with self.client(timeout=1.0, node_id=node_id) as c:
                statuses = c.status()
        except QuorumLogError:
            return None
        return next((s for s in statuses if s.get("node_id") == node_id), None)

    def wait_for_leader(self, timeout_s: float = 30.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in list(self.procs):
                status = self.node_status(i)
                if status and status.get("role") == "leader":
                    return i
            time.sleep(0.1)
        raise AssertionError(f"no leader within {timeout_s} s")

    def wait_converged(self, timeout_s: float = 60.0) -> dict[int, dict]:
        """Every running node holds and commits the same log."""
        deadline = time.monotonic() + timeout_s
        statuses: dict[int, dict | None] = {}
        while time.monotonic() < deadline:
            statuses = {i: self.node_status(i) for i in self.procs}
            views = {
                (s["dirty_offset"], s["commit_offset"]) if s else None for s in statuses.values()
            }
            if len(views) == 1 and None not in views:
                dirty, commit = views.pop()
                if dirty == commit:
                    return statuses
            time.sleep(0.2)
        raise AssertionError(f"nodes did not converge within {timeout_s} s: {statuses}")
