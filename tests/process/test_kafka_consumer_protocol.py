"""Real processes: Kafka's consumer group protocol (KIP-848, `group.protocol=consumer`)
on quorumlog's coordinators, with confluent-kafka: members share a topic's partitions as
the coordinator's assignor says, a member that leaves or is killed hands its partitions
over, and committed offsets are where a later member resumes."""

from __future__ import annotations

import io
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from quorumlog import Record
from quorumlog.bench import kafka_java
from quorumlog.bench.kafka_java import CONSOLE_CONSUMER, CONSUMER_GROUPS, run_tool
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.transport.kafka import make
from tests.process.kafka_support import kafka_cluster
from tests.process.test_topics import wait_until

PARTITIONS = 4
SESSION_TIMEOUT_S = 6
# Kafka's defaults are 5 s and 45 s; shorter here so that a test takes seconds.
NODE_ENV = {
    "QUORUMLOG_CONSUMER_HEARTBEAT_INTERVAL_MS": "500",
    "QUORUMLOG_CONSUMER_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_S * 1000),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-kip848")), NODE_ENV)


def fill(cluster: ProcessCluster, topic: str, per_partition: int) -> set[bytes]:
    with cluster.client(timeout=30) as c:
        c.create_topic(topic, partitions=PARTITIONS, replicas=3)
        values = set()
        for p in range(PARTITIONS):
            batch = [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(per_partition)]
            c.append([Record(v) for v in batch], topic=topic, partition=p)
            values |= set(batch)
    return values


def member_config(cluster: ProcessCluster, group: str) -> dict:
    return {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }


class Member:
    """A confluent-kafka consumer of the consumer protocol and what it has read."""

    def __init__(self, cluster: ProcessCluster, group: str, topic: str):
        self.consumer = Consumer(member_config(cluster, group))
        self.consumer.subscribe([topic])
        self.seen: set[bytes] = set()

    def poll(self) -> None:
        message = self.consumer.poll(0.1)
        if message is not None and message.error() is None:
            self.seen.add(message.value())

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def test_two_members_share_and_the_one_left_gets_all_when_the_other_closes(cluster):
    written = fill(cluster, "kip848-shared", per_partition=10)
    members = [Member(cluster, "kip848-shared", "kip848-shared") for _ in range(2)]

    def balanced() -> bool:
        for m in members:
            m.poll()
        first, second = (m.partitions() for m in members)
        return len(first) == len(second) == PARTITIONS // 2 and not first & second

    try:
        wait_until(balanced, 30, "two members with two partitions each")
        members[0].consumer.close()  # leaves (epoch -1): the other gets every partition

        def taken_over() -> bool:
            members[1].poll()
            return members[1].partitions() == set(range(PARTITIONS))

        wait_until(taken_over, 30, "the remaining member with every partition")
        deadline = time.monotonic() + 30
        while members[0].seen | members[1].seen != written and time.monotonic() < deadline:
            members[1].poll()
        assert members[0].seen | members[1].seen == written
    finally:
        members[1].consumer.close()


KILLED_MEMBER = """
import sys
from confluent_kafka import Consumer, TopicPartition
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                     "group.protocol": "consumer", "enable.auto.commit": False})
consumer.subscribe([sys.argv[3]])
while True:
    consumer.poll(0.1)
    print(len(consumer.assignment()), flush=True)
"""


def test_a_killed_member_loses_its_partitions_within_the_session_timeout(cluster):
    fill(cluster, "kip848-killed", per_partition=1)
    survivor = Member(cluster, "kip848-killed", "kip848-killed")
    doomed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED_MEMBER,
            cluster.kafka_bootstrap,
            "kip848-killed",
            "kip848-killed",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:

        def shared() -> bool:
            survivor.poll()
            return len(survivor.partitions()) == PARTITIONS // 2

        wait_until(shared, 30, "the survivor with half the partitions")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        killed_at = time.monotonic()

        def taken_over() -> bool:
            survivor.poll()
            return survivor.partitions() == set(range(PARTITIONS))

        wait_until(taken_over, SESSION_TIMEOUT_S + 5, "the survivor with every partition")
        assert time.monotonic() - killed_at >= SESSION_TIMEOUT_S - 1  # by the timeout, not before
    finally:
        doomed.kill()
        doomed.wait()
        survivor.consumer.close()


def test_committed_offsets_are_where_the_next_member_resumes(cluster):
    written = fill(cluster, "kip848-commits", per_partition=5)
    first = Member(cluster, "kip848-commits", "kip848-commits")
    try:
        deadline = time.monotonic() + 30
        while first.seen != written and time.monotonic() < deadline:
            first.poll()
        assert first.seen == written
        first.consumer.commit(asynchronous=False)
    finally:
        first.consumer.close()
    with cluster.client(timeout=30) as c:
        rows = c.describe_group("kip848-commits")["partitions"]
        assert sorted(r["committed"] for r in rows) == [5] * PARTITIONS
        for p in range(PARTITIONS):
            c.append([Record(b"late-%d" % p)], topic="kip848-commits", partition=p)
    second = Member(cluster, "kip848-commits", "kip848-commits")
    try:
        late = {b"late-%d" % p for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while second.seen != late and time.monotonic() < deadline:
            second.poll()
        end = time.monotonic() + 1
        while time.monotonic() < end:
            second.poll()
        assert second.seen == late  # nothing committed is read again
    finally:
        second.consumer.close()


def java_tool(cluster: ProcessCluster, main_class: str, *args: str) -> str:
    """A Kafka 4.4 tool's output; it must exit 0."""
    done = run_tool(main_class, ["--bootstrap-server", cluster.kafka_bootstrap, *args], 90)
    assert done.returncode == 0, f"{main_class} {args} exited {done.returncode}:\n{done.stderr}"
    return done.stdout + done.stderr


def test_kafka_java_console_consumer_of_the_consumer_protocol_and_its_describe(cluster):
    why = kafka_java.why_unavailable()
    if why is not None:
        pytest.skip(f"Kafka's Java tools are not available: {why}")
    written = fill(cluster, "kip848-java", per_partition=5)
    out = java_tool(
        cluster,
        *(CONSOLE_CONSUMER, "--topic", "kip848-java", "--group", "kip848-java"),
        *("--consumer-property", "group.protocol=consumer", "--from-beginning"),
        *("--max-messages", str(len(written)), "--timeout-ms", "30000"),
    )
    assert f"Processed a total of {len(written)} messages" in out, out
    assert {line.encode() for line in out.splitlines()} >= written
    rows = table(java_tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "kip848-java"))
    assert sorted(
        (r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"]) for r in rows
    ) == [(str(p), "5", "0", "-") for p in range(PARTITIONS)], (
        rows
    )  # committed as the consumer closed, and no member left

    # A live member of the consumer protocol, as the tool describes it.
    live = subprocess.Popen(
        kafka_java.java_command(
            CONSOLE_CONSUMER,
            [
                *("--bootstrap-server", cluster.kafka_bootstrap, "--topic", "kip848-java"),
                *("--group", "kip848-java", "--consumer-property", "group.protocol=consumer"),
                *("--consumer-property", "client.id=kip848-live"),
            ],
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Read together, and again until they agree: the group's coordinator may move
        # while the cluster is young (its members then join the new one).
        seen: dict[str, list[dict[str, str]]] = {}

        def described() -> bool:
            for view in ("--members", "--state"):
                args = ("--describe", "--group", "kip848-java", view, "--verbose")
                seen[view] = table(java_tool(cluster, CONSUMER_GROUPS, *args))
            return len(seen["--members"]) == 1 and seen["--state"][0]["STATE"] == "Stable"

        wait_until(described, 60, "the live member described, the group stable")
        (member,) = seen["--members"]
        assert (member["HOST"], member["CLIENT-ID"], member["#PARTITIONS"]) == (
            "/127.0.0.1",
            "kip848-live",
            "4",
        ), member
        assert member["CURRENT-ASSIGNMENT"] == member["TARGET-ASSIGNMENT"] == "kip848-java:0,1,2,3"
        assert member["CURRENT-EPOCH"] == member["TARGET-EPOCH"], member
        (state,) = seen["--state"]
        assert (state["ASSIGNMENT-STRATEGY"], state["#MEMBERS"]) == ("uniform", "1"), state
    finally:
        live.kill()
        live.wait()


def table(output: str) -> list[dict[str, str]]:
    """The rows of a kafka-consumer-groups table, by column name."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    header = next(i for i, words in enumerate(lines) if words and words[0] == "GROUP")
    return [
        dict(zip(lines[header], words, strict=True))
        for words in lines[header + 1 :]
        if len(words) == len(lines[header])
    ]


class Wire:
    """Kafka requests as kio builds them, to one broker, answers read at the same version."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.correlation = 0

    def ask(self, key: int, version: int, values: dict):
        self.correlation += 1
        schema = load_request_schema(key, version)
        out = io.BytesIO()
        header = {
            "request_api_key": key,
            "request_api_version": version,
            "correlation_id": self.correlation,
            "client_id": "kip848-wire",
        }
        entity_writer(schema.__header_schema__)(out, make(schema.__header_schema__, header))
        entity_writer(schema)(out, make(schema, values))
        self.sock.sendall(struct.pack(">i", out.tell()) + out.getvalue())
        (size,) = struct.unpack(">i", self._exactly(4))
        frame = self._exactly(size)
        response = load_response_schema(key, version)
        header_read, at = entity_reader(response.__header_schema__)(frame, 0)
        assert header_read.correlation_id == self.correlation
        return entity_reader(response)(frame, at)[0]

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def coordinator_of(bootstrap: str, group: str) -> Wire:
    """A connection to the group's coordinator (FindCoordinator v2 to each bootstrap broker
    in turn, until one names a coordinator that takes the connection)."""
    deadline = time.monotonic() + 30
    while True:
        for address in bootstrap.split(","):
            try:
                first = Wire(address)
                try:
                    found = first.ask(10, 2, {"key_type": 0, "key": group})
                finally:
                    first.close()
                if found.error_code == 0:
                    return Wire(f"{found.host}:{found.port}")
            except OSError:  # a broker down, or the coordinator named
                pass
        assert time.monotonic() < deadline, f"no coordinator of {group}"
        time.sleep(0.2)


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    wire = Wire(bootstrap.split(",")[0])
    try:
        answer = wire.ask(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        return answer.topics[0].topic_id
    finally:
        wire.close()


def heartbeat(wire: Wire, group: str, member: str, epoch: int, **fields) -> tuple:
    """A ConsumerGroupHeartbeat v1 and its answer as (error, epoch, assigned partitions or
    None when the answer carries no assignment)."""
    answer = wire.ask(
        68, 1, {"group_id": group, "member_id": member, "member_epoch": epoch, **fields}
    )
    partitions = None
    if answer.assignment is not None:
        partitions = sorted(p for t in answer.assignment.topic_partitions for p in t.partitions)
    return (answer.error_code.name, answer.member_epoch, partitions)


def commit(wire: Wire, group: str, member: str, epoch: int, version: int, topic: str, p: int):
    """An OffsetCommit of offset 0 of one partition, and its error."""
    answer = wire.ask(
        8,
        version,
        {
            "group_id": group,
            "generation_id_or_member_epoch": epoch,
            "member_id": member,
            "topics": [{"name": topic, "partitions": [{"partition_index": p}]}],
        },
    )
    return answer.topics[0].partitions[0].error_code.name


MOVING_COORDINATOR = (
    "coordinator_load_in_progress",
    "not_coordinator",
    "coordinator_not_available",
)


def reconciliation(bootstrap: str, topic: str, group: str) -> dict:
    """Two members of a group of `topic` (4 partitions) driven by hand: the first takes
    every partition, the second joins while the first keeps listing all four for a while
    (what the second is given meanwhile), then the first lists only what it is left and the
    second gets the rest; then the errors of bad heartbeats, and the first leaving."""
    tid = topic_id(bootstrap, topic)
    wire = coordinator_of(bootstrap, group)
    join = {"rebalance_timeout": 30000, "subscribed_topic_names": [topic], "topic_partitions": []}
    members = {"member-a": [0, None], "member-b": [0, None]}  # epoch, assigned

    def beat(member: str, owned: list[int] | None) -> tuple:
        epoch, _ = members[member]
        fields = join if epoch == 0 else {}
        if owned is not None and epoch:
            fields = {"topic_partitions": [{"topic_id": tid, "partitions": owned}]}
        nonlocal wire
        answer = heartbeat(wire, group, member, epoch, **fields)
        deadline = time.monotonic() + 30
        # A young cluster's coordinator may still load the group's partition or move it.
        while answer[0] in MOVING_COORDINATOR and time.monotonic() < deadline:
            time.sleep(0.5)
            wire.close()
            wire = coordinator_of(bootstrap, group)
            answer = heartbeat(wire, group, member, epoch, **fields)
        assert answer[0] == "none", (member, answer)
        members[member][0] = answer[1]
        if answer[2] is not None:
            members[member][1] = answer[2]
        return answer

    def until(condition, what: str) -> None:
        deadline = time.monotonic() + 20
        while not condition():
            assert time.monotonic() < deadline, (what, members)
            time.sleep(0.1)

    out: dict = {}
    try:

        def a_holds_all() -> bool:
            beat("member-a", members["member-a"][1])
            return members["member-a"][1] == [0, 1, 2, 3]

        until(a_holds_all, "a with every partition")
        given_meanwhile: set[int] = set()
        for _ in range(15):  # a still lists all four: b may get none of them
            beat("member-a", [0, 1, 2, 3])
            beat("member-b", [])
            given_meanwhile |= set(members["member-b"][1] or ())
            time.sleep(0.1)
        out["given to b while a lists all"] = sorted(given_meanwhile)
        out["left to a"] = members["member-a"][1]

        def b_holds_two() -> bool:
            beat("member-a", members["member-a"][1])  # lists only what it is left
            beat("member-b", None)
            return len(members["member-b"][1] or ()) == 2

        until(b_holds_two, "b with two partitions")
        out["a, b"] = (members["member-a"][1], members["member-b"][1])
        epoch = members["member-a"][0]
        out["fenced"] = heartbeat(wire, group, "member-a", epoch + 5)[0]
        out["unknown member"] = heartbeat(wire, group, "member-z", epoch)[0]
        out["unknown assignor"] = heartbeat(wire, group, "c", 0, **join, server_assignor="nope")[0]
        regex = {**join, "subscribed_topic_names": None, "subscribed_topic_regex": "("}
        out["bad regex"] = heartbeat(wire, group, "c", 0, **regex)[0]
        out["no subscription"] = heartbeat(
            wire, group, "c", 0, rebalance_timeout=30000, topic_partitions=[]
        )[0]
        out["no group id"] = heartbeat(wire, "", "c", 0, **join)[0]
        out["no member id"] = heartbeat(wire, group, "", 0, **join)[0]
        partition = members["member-a"][1][0]
        for case, member, member_epoch, version in [
            ("commit", "member-a", epoch, 9),
            ("commit, a stale epoch", "member-a", epoch - 1, 9),
            ("commit v7 by a member", "member-a", epoch, 7),
            ("commit, no member", "", -1, 9),
            ("commit, another's id", "member-z", epoch, 9),
        ]:
            out[case] = commit(wire, group, member, member_epoch, version, topic, partition)
        b_epoch, b_partitions = members["member-b"]
        out["commit by b, an epoch before it held the partition"] = commit(
            wire, group, "member-b", b_epoch - 1, 9, topic, b_partitions[0]
        )
        out["leave"] = heartbeat(wire, group, "member-a", -1)[:2]
        return out
    finally:
        wire.close()


# What a Kafka 4.4 KRaft cluster (3 brokers, bench/kafka_java.py's KafkaBrokers) answered
# to `reconciliation`, recorded by running it there.
KAFKA_44_RECONCILIATION = {
    "given to b while a lists all": [],
    "left to a": [0, 1],
    "a, b": ([0, 1], [2, 3]),
    "fenced": "fenced_member_epoch",
    "unknown member": "unknown_member_id",
    "unknown assignor": "unsupported_assignor",
    "bad regex": "invalid_regular_expression",
    "no subscription": "invalid_request",
    "no group id": "invalid_request",
    "no member id": "invalid_request",
    "commit": "none",
    "commit, a stale epoch": "none",  # a held the partition at that epoch already
    "commit v7 by a member": "unsupported_version",
    "commit, no member": "unknown_member_id",
    "commit, another's id": "unknown_member_id",
    "commit by b, an epoch before it held the partition": "stale_member_epoch",
    "leave": ("none", -1),
}


def test_reconciliation_and_bad_heartbeats_are_answered_as_kafka_4_4_answers(cluster):
    with cluster.client(timeout=30) as c:
        c.create_topic("kip848-wire", partitions=PARTITIONS, replicas=3)
    answers = reconciliation(cluster.kafka_bootstrap, "kip848-wire", "kip848-wire")
    assert answers == KAFKA_44_RECONCILIATION
    assert all(proc.poll() is None for proc in cluster.procs.values())


def classic_join(wire: Wire, group: str, protocol_type: str) -> str:
    answer = wire.ask(
        11,
        5,
        {
            "group_id": group,
            "session_timeout": 30000,
            "rebalance_timeout": 30000,
            "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )
    return answer.error_code.name


def test_a_group_is_of_one_protocol_and_describe_shows_this_ones(cluster):
    """As Kafka 4.4 answered (same requests): a classic join to a group with members of
    this protocol is refused, and a heartbeat of this protocol to a classic group."""
    with cluster.client(timeout=30) as c:
        c.create_topic("kip848-mixed", partitions=2, replicas=3)
    join = {
        "rebalance_timeout": 30000,
        "subscribed_topic_names": ["kip848-mixed"],
        "topic_partitions": [],
    }
    wire = coordinator_of(cluster.kafka_bootstrap, "kip848-new")
    try:
        assert heartbeat(wire, "kip848-new", "member-a", 0, **join)[0] == "none"
        for protocol_type in ("consumer", "connect"):
            refused = classic_join(wire, "kip848-new", protocol_type)
            assert refused == "inconsistent_group_protocol"
        described = wire.ask(69, 1, {"group_ids": ["kip848-new"]}).groups[0]
        assert (described.error_code.name, described.group_state) == ("none", "Stable")
        assert (described.assignor_name, described.group_epoch) == ("uniform", 1)
        (member,) = described.members
        assert (member.member_id, member.client_id, member.client_host) == (
            "member-a",
            "kip848-wire",
            "/127.0.0.1",
        )
        assert (member.member_epoch, member.subscribed_topic_names) == (1, ("kip848-mixed",))
        assert member.member_type == 1  # of this protocol
        assigned = {(t.topic_name, tuple(t.partitions)) for t in member.assignment.topic_partitions}
        assert assigned == {("kip848-mixed", (0, 1))}
        listed = {(g.group_id, g.protocol_type) for g in wire.ask(16, 2, {}).groups}
        assert ("kip848-new", "consumer") in listed  # before it committed anything
    finally:
        wire.close()
    wire = coordinator_of(cluster.kafka_bootstrap, "kip848-old")
    try:
        assert classic_join(wire, "kip848-old", "connect") == "none"
        answer = wire.ask(68, 1, {"group_id": "kip848-old", "member_id": "q", **join})
        assert answer.error_code.name == "group_id_not_found", answer
        described = wire.ask(69, 1, {"group_ids": ["kip848-old"]}).groups[0]
        assert described.error_code.name == "group_id_not_found"
    finally:
        wire.close()


def test_a_regex_subscription_with_the_range_assignor(cluster):
    with cluster.client(timeout=30) as c:
        for topic in ("kip848-re-a", "kip848-re-b", "kip848-other"):
            c.create_topic(topic, partitions=2, replicas=3)
    configs = [
        {**member_config(cluster, "kip848-re"), "group.remote.assignor": "range"} for _ in range(2)
    ]
    members = [Consumer(config) for config in configs]
    for member in members:
        member.subscribe(["^kip848-re-.*"])
    try:

        def assignments() -> list:
            for member in members:
                member.poll(0.1)
            return [sorted((tp.topic, tp.partition) for tp in m.assignment()) for m in members]

        # range: per topic, the member of the lower id gets partition 0 of each; the
        # topic the pattern does not match is no one's.
        expected = [
            [("kip848-re-a", 0), ("kip848-re-b", 0)],
            [("kip848-re-a", 1), ("kip848-re-b", 1)],
        ]
        wait_until(
            lambda: sorted(assignments()) == expected, 30, "one partition of each topic each"
        )
        wire = coordinator_of(cluster.kafka_bootstrap, "kip848-re")
        try:
            described = wire.ask(69, 1, {"group_ids": ["kip848-re"]}).groups[0]
        finally:
            wire.close()
        assert described.assignor_name == "range"
        regexes = {m.subscribed_topic_regex for m in described.members}
        assert regexes == {"(^kip848-re-.*)"}  # as librdkafka sends it
        # A pattern that could take the node too long to match is refused (Kafka's RE2/J
        # would take it), saying why; the node stays up.
        wire = coordinator_of(cluster.kafka_bootstrap, "kip848-re")
        try:
            join = {"rebalance_timeout": 30000, "subscribed_topic_regex": "(a+)+$"}
            answer = wire.ask(
                68, 1, {"group_id": "kip848-re", "member_id": "x", **join, "topic_partitions": []}
            )
        finally:
            wire.close()
        assert answer.error_code.name == "invalid_regular_expression"
        assert "a repeat inside a repeat" in answer.error_message
        assert all(proc.poll() is None for proc in cluster.procs.values())
    finally:
        for member in members:
            member.close()


def test_after_the_coordinator_is_killed_the_member_joins_the_next_and_resumes(cluster):
    """Membership is the coordinator's memory: the next coordinator does not know the
    member, which joins it again (UNKNOWN_MEMBER_ID, then epoch 0), its partitions lost,
    and resumes from the committed offsets (3 of each partition's 5 records here, so the
    last 2 are read again). Last in the module: it kills a node (started again after)."""
    topic = group = "kip848-failover"
    written = fill(cluster, topic, per_partition=5)
    member = Member(cluster, group, topic)
    try:
        deadline = time.monotonic() + 30
        while member.seen != written and time.monotonic() < deadline:
            member.poll()
        assert member.seen == written
        committed = [TopicPartition(topic, p, 3) for p in range(PARTITIONS)]
        member.consumer.commit(offsets=committed, asynchronous=False)
        first = coordinator_of(cluster.kafka_bootstrap, group)
        old = first.ask(10, 2, {"key_type": 0, "key": group}).node_id
        first.close()
        member.seen.clear()
        cluster.kill(old, signal.SIGKILL)
        try:

            def joined_the_next() -> bool:
                member.poll()
                wire = coordinator_of(cluster.kafka_bootstrap, group)
                try:
                    found = wire.ask(69, 1, {"group_ids": [group]}).groups[0]
                finally:
                    wire.close()
                return found.error_code == 0 and len(found.members) == 1

            wait_until(joined_the_next, 60, "the member in the next coordinator's group")
            again = {
                b"%s-%d-%d" % (topic.encode(), p, i) for p in range(PARTITIONS) for i in (3, 4)
            }
            deadline = time.monotonic() + 30
            while member.seen != again and time.monotonic() < deadline:
                member.poll()
            assert member.seen == again  # from the committed offsets on
            assert member.partitions() == set(range(PARTITIONS))
        finally:
            cluster.start(old)
    finally:
        member.consumer.close()
