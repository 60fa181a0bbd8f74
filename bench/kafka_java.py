"""Apache Kafka 4.4's own Java programs, from Maven Central: its command-line tools run
against quorumlog's Kafka listener (tests/process/test_kafka_java_tools.py), and its
broker, started here as a KRaft cluster on 127.0.0.1, for the same tools and, later,
`quorumlog bench vs-kafka`.

No Kafka tarball: java/kafka/pom.xml names the artifacts (the broker, tools, clients,
Streams, Connect, an slf4j binding) and Maven copies them, with everything they need,
into one folder, `.cache/kafka-4.4/lib` in the checkout; every program then runs as
`java -cp 'lib/*' MAIN_CLASS ...`, as Kafka's own `kafka-run-class.sh` does. `make test`
fills the folder once (`python -m quorumlog.bench.kafka_java fetch`); `lib_dir()` fills it
on demand where mvn is there. Without java (17 or later: Kafka 4's brokers and tools need
it) or without the jars, `why_unavailable()` says why, and the callers skip.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

KAFKA_VERSION = "4.4.0"

# The main classes of the scripts in Kafka's bin/ (kafka-topics.sh and so on), 4.4.
TOPICS = "org.apache.kafka.tools.TopicCommand"  # kafka-topics
CONFIGS = "org.apache.kafka.tools.ConfigCommand"  # kafka-configs
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"  # kafka-console-producer
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"  # kafka-console-consumer
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"  # kafka-get-offsets
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"  # kafka-producer-perf-test
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"  # kafka-consumer-perf-test
BROKER = "kafka.Kafka"  # kafka-server-start
STORAGE = "kafka.tools.StorageTool"  # kafka-storage

# A jar of each kind the tests use: present, the folder was filled by this pom's fetch.
REQUIRED_JARS = (f"kafka_2.13-{KAFKA_VERSION}.jar", f"kafka-tools-{KAFKA_VERSION}.jar")

SOURCE_ROOT = Path(__file__).resolve().parent.parent
POM = SOURCE_ROOT / "java" / "kafka" / "pom.xml"
CACHE_ENV = "QUORUMLOG_KAFKA_JAVA_CACHE"

# A tool's heap, as kafka-run-class.sh gives it (the JVM's default is a quarter of RAM);
# a tool lives a second or two, so the JVM compiles little and collects simply. The JVM's
# own log (a class-data-sharing warning, say) goes to stderr: stdout is the tool's.
TOOL_JVM = (
    "-Xmx256m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xlog:disable",
    "-Xlog:all=warning:stderr",
)
# The perf tests measure: the JVM's defaults, full compilation included.
PERF_JVM = ("-Xmx512m", "-Xlog:disable", "-Xlog:all=warning:stderr")
# A broker's: 512 MiB (KAFKA_HEAP_OPTS) and the G1 settings of kafka-server-start.sh.
BROKER_JVM = (
    "-Xmx512m",
    "-Xlog:disable",
    "-Xlog:all=warning:stderr",
    "-Xms512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)

# Tools print their output on stdout (a console consumer, its records): log4j must keep
# off it, so warnings and errors go to stderr and the rest nowhere.
TOOLS_LOG4J = """\
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = STDERR
"""
# A broker logs at INFO to its stdout, which KafkaBrokers sends to the broker's own file;
# the request log and the state change log, chatty at INFO, only warn.
BROKER_LOG4J = """\
status = error
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
"""


def cache_dir() -> Path:
    """Where the jars go: $QUORUMLOG_KAFKA_JAVA_CACHE, else .cache/kafka-4.4 in the checkout."""
    return Path(os.environ.get(CACHE_ENV) or SOURCE_ROOT / ".cache" / "kafka-4.4")


def _lib() -> Path:
    return cache_dir() / "lib"


def _stamp() -> Path:
    # The pom the folder was filled from: another pom (a new version) fills it anew.
    return cache_dir() / "lib.pom-sha256"


def _pom_digest() -> str | None:
    try:
        return hashlib.sha256(POM.read_bytes()).hexdigest()
    except OSError:
        return None  # installed without the checkout: whatever the cache holds is it


def _filled() -> bool:
    if not all((_lib() / jar).is_file() for jar in REQUIRED_JARS):
        return False
    digest = _pom_digest()
    if digest is None:
        return True
    try:
        return _stamp().read_text().strip() == digest
    except OSError:
        return False


def fetch(timeout_s: float = 900.0) -> str | None:
    """Fill the cache with the pom's jars unless it holds them; None, or why it could not.
    Maven writes into a fresh folder that replaces the old one only when complete, and a
    lock keeps two fetches (make and a test, say) from running at once."""
    if _filled():
        return None
    if not POM.is_file():
        return f"{POM} is not there (a source checkout has it) and {_lib()} has no Kafka jars"
    if shutil.which("mvn") is None:
        return "no `mvn` on PATH to fetch Kafka's jars from Maven Central (Debian: maven)"
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _filled():  # another process filled it while we waited
            return None
        partial = cache / "lib.partial"
        shutil.rmtree(partial, ignore_errors=True)
        command = ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies"]
        command.append(f"-DoutputDirectory={partial}")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"`mvn dependency:copy-dependencies` took more than {timeout_s:.0f} s"
        if done.returncode != 0:
            lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "ERROR" in ln]
            return "mvn could not fetch Kafka's jars: " + (lines[0] if lines else "failed")
        shutil.rmtree(_lib(), ignore_errors=True)
        partial.rename(_lib())
        _stamp().write_text(_pom_digest() or "")
    return None


@functools.cache
def _java_major() -> int | None:
    java = shutil.which("java")
    if java is None:
        return None
    done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr)
    if not found:
        return 0
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8" is Java 8


@functools.cache
def why_unavailable() -> str | None:
    """Why Kafka's Java programs cannot run here (fetching the jars first if they are
    missing and mvn is there), or None. Asked once per process."""
    major = _java_major()
    if major is None:
        return "no `java` on PATH (Kafka 4.4 needs Java 17 or later; Debian: default-jre)"
    if major < 17:
        return f"Kafka 4.4 needs Java 17 or later, `java` is {major}"
    return fetch()


def lib_dir() -> Path:
    """The folder of jars, fetched if missing; RuntimeError saying why if it cannot be."""
    why = why_unavailable()
    if why is not None:
        raise RuntimeError(why)
    return _lib()


def _log_config(name: str, text: str) -> Path:
    path = cache_dir() / name
    if not path.is_file() or path.read_text() != text:
        temporary = path.with_name(f"{name}.{os.getpid()}")
        temporary.write_text(text)
        temporary.replace(path)
    return path


def _jvm_for(main_class: str) -> tuple[str, ...]:
    return PERF_JVM if main_class in (PRODUCER_PERF, CONSUMER_PERF) else TOOL_JVM


@functools.cache
def _class_archive() -> Path:
    """The tools' archive of loaded classes (the JVM's dynamic class-data sharing): a JVM
    that maps it starts a tool in about half the time (0.6 s rather than 1.1-1.4 s here).
    Named after the JVM and the jars, which it is only good for."""
    done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    key = hashlib.sha256((done.stderr + (_pom_digest() or "")).encode()).hexdigest()[:12]
    return cache_dir() / f"tools-{key}.jsa"


def java_command(
    main_class: str,
    args: Sequence[str],
    jvm: Sequence[str] | None = None,
    broker: bool = False,
) -> list[str]:
    """The command line that runs one of Kafka's programs from the jars (logging as a
    tool does, or as a broker); `jvm` replaces the JVM's options (default: a tool's, or a
    perf test's)."""
    if broker:
        log4j = _log_config("log4j2-broker.properties", BROKER_LOG4J)
    else:
        log4j = _log_config("log4j2-tools.properties", TOOLS_LOG4J)
    return [
        "java",
        *(_jvm_for(main_class) if jvm is None else jvm),
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{lib_dir()}/*",  # the JVM expands the wildcard, in the folder's order
        main_class,
        *args,
    ]


def run_tool(
    main_class: str,
    args: Sequence[str],
    timeout: float = 60.0,
    input: str | None = None,
    jvm: Sequence[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool to its end and return it, stdout and stderr as text; it is the
    caller's to look at the exit code (a tool that fails exits 1, but some print an error
    and exit 0). subprocess.TimeoutExpired past `timeout`.

    The first tool run writes the archive of the classes it loaded, the later ones map it
    (a JVM that finds it unusable starts without it)."""
    command = java_command(main_class, args, jvm)
    archive = _class_archive()
    dumped = archive.with_name(f"{archive.name}.{os.getpid()}")
    sharing = f"-XX:SharedArchiveFile={archive}"
    if not archive.is_file():
        sharing = f"-XX:ArchiveClassesAtExit={dumped}"
    # After the JVM's options (-Xlog:disable there would undo it): the JVM's warnings on
    # what it leaves out of the archive, or why it cannot map one, are no tool's output.
    at = command.index("-cp")
    command[at:at] = [sharing, "-Xlog:cds*=off:stderr"]
    done = subprocess.run(
        command,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL,
    )
    if dumped.is_file():
        dumped.replace(archive)
    return done


# --- Kafka's own brokers -------------------------------------------------------------------


def random_cluster_id() -> str:
    """A KRaft cluster id as `kafka-storage random-uuid` makes it: 16 random bytes, base64
    for URLs, unpadded, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def metadata(port: int, host: str = "127.0.0.1", timeout: float = 2.0) -> tuple[list[int], int]:
    """Ask a Kafka listener for Metadata (v4, no topics): the ids of the brokers it names
    and its controller id. OSError if it does not answer. v4 is the oldest that Kafka 4
    still serves, and quorumlog serves it too."""
    client_id = b"quorumlog-bench"
    header = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id
    body = struct.pack(">i?", 0, False)  # no topics, no auto-creation
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        size = struct.unpack(">i", _read(sock, 4))[0]
        frame = _read(sock, size)
    at = 8  # correlation id, throttle time
    (count,) = struct.unpack_from(">i", frame, at)
    at += 4
    brokers = []
    for _ in range(count):
        node_id, host_length = struct.unpack_from(">ih", frame, at)
        at += 6 + host_length + 4  # host, port
        (rack_length,) = struct.unpack_from(">h", frame, at)
        at += 2 + max(rack_length, 0)
        brokers.append(node_id)
    (cluster_length,) = struct.unpack_from(">h", frame, at)
    at += 2 + max(cluster_length, 0)
    (controller,) = struct.unpack_from(">i", frame, at)
    return sorted(brokers), controller


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


class KafkaBrokers:
    """N Apache Kafka 4.4 processes on 127.0.0.1, each broker and KRaft controller at once
    (`process.roles=broker,controller`, static voters), their storage formatted with one
    cluster id, each in `root/kafka-N` with its log in `root/kafka-N.log`. Replication as
    a careful production cluster has it: 3 replicas (when N >= 3), 2 in sync to acknowledge
    acks=all. `extra` adds or overrides server properties (`log.flush.interval.messages=1`
    fsyncs every message, as quorumlog does). Use as a context manager, or start()/stop()."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        count: int = 3,
        extra: dict[str, str] | None = None,
        jvm: Sequence[str] = BROKER_JVM,
    ) -> None:
        from quorumlog.cli.localcluster import free_ports

        self.root = Path(root)
        self.count = count
        self.extra = dict(extra or {})
        self.jvm = tuple(jvm)
        self.cluster_id = random_cluster_id()
        ports = free_ports(2 * count)
        self.ports, self.controller_ports = ports[:count], ports[count:]
        self.procs: dict[int, subprocess.Popen] = {}
        self.start_s: float | None = None  # how long start() took, formatting included

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.count + 1))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def properties(self, node_id: int) -> dict[str, str]:
        replicas = min(3, self.count)
        in_sync = min(2, replicas)
        voters = ",".join(f"{i}@127.0.0.1:{self.controller_ports[i - 1]}" for i in self.ids)
        port, controller_port = self.ports[node_id - 1], self.controller_ports[node_id - 1]
        return {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.root / f"kafka-{node_id}" / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(replicas),
            "min.insync.replicas": str(in_sync),
            "offsets.topic.replication.factor": str(replicas),
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(in_sync),
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(in_sync),
            # A test's consumer group should not wait 3 s for more members to come.
            "group.initial.rebalance.delay.ms": "0",
            **self.extra,
        }

    def _config_file(self, node_id: int) -> Path:
        folder = self.root / f"kafka-{node_id}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties(node_id).items()))
        return path

    def format(self, timeout_s: float = 120.0) -> None:
        """Format every node's log folder with the cluster id, the nodes at once."""
        formats = []
        for node_id in self.ids:
            config = self._config_file(node_id)
            args = ["format", "-t", self.cluster_id, "-c", str(config), "--ignore-formatted"]
            command = java_command(STORAGE, args)
            formats.append(
                subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
        for node_id, proc in zip(self.ids, formats, strict=True):
            out, _ = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0:
                raise RuntimeError(f"kafka-storage format of node {node_id} failed: {out.strip()}")

    def start(self, timeout_s: float = 120.0) -> None:
        """Format, start every node, and wait until each one's Metadata names them all."""
        started = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self.format(timeout_s)
        for node_id in self.ids:
            self.start_node(node_id)
        self.wait_ready(timeout_s - (time.monotonic() - started))
        self.start_s = time.monotonic() - started

    def start_node(self, node_id: int) -> subprocess.Popen:
        config = self.root / f"kafka-{node_id}" / "server.properties"
        log = open(self.root / f"kafka-{node_id}.log", "ab")  # noqa: SIM115
        with log:
            proc = subprocess.Popen(
                java_command(BROKER, [str(config)], self.jvm, broker=True),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.procs[node_id] = proc
        return proc

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until every running node's Metadata names every node and a controller."""
        deadline = time.monotonic() + timeout_s
        waiting = set(self.procs)
        while waiting:
            for node_id in sorted(waiting):
                proc = self.procs[node_id]
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"Kafka node {node_id} exited ({proc.returncode}): see "
                        f"{self.root / f'kafka-{node_id}.log'}"
                    )
                with contextlib.suppress(OSError, struct.error):
                    brokers, controller = metadata(self.ports[node_id - 1])
                    if brokers == self.ids and controller >= 0:
                        waiting.discard(node_id)
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"Kafka nodes {sorted(waiting)} not ready in {timeout_s:.0f} s")
            if waiting:
                time.sleep(0.2)

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM every node (a clean shutdown), SIGKILL what is left after `timeout_s`:
        in a cluster stopping whole, the node that stops last waits for good on a
        controller quorum that is gone (seen: the first two stop within a second)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> KafkaBrokers:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str]) -> int:
    """`python -m quorumlog.bench.kafka_java fetch`: fill the cache (make test does), or
    print one line saying why not and exit 1."""
    if list(argv) != ["fetch"]:
        print("usage: python -m quorumlog.bench.kafka_java fetch", file=sys.stderr)
        return 2
    why = why_unavailable()
    if why is not None:
        print(f"Kafka's Java programs are not available, their tests will be skipped: {why}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
