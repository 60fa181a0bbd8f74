"""Real processes: consumer groups in stream mode (docs/groups.md, "Stream mode"):
members share a topic's partitions, rebalance when one joins, leaves or dies, resume from
committed positions, and keep them through a coordinator's failover."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import trio

from quorumlog import (
    AsyncConsumer,
    Consumer,
    NotMemberError,
    QuorumLogError,
    Record,
    UnknownTopicError,
)
from quorumlog.cli.localcluster import QUORUMLOG
from quorumlog.consumers.state import GROUPS_PARTITIONS, GROUPS_TOPIC, groups_partition
from tests.process.test_topics import wait_until

PARTITIONS = 4


def fill(cluster, topic: str = "events", per_partition: int = 50) -> dict[tuple, set[int]]:
    """A topic of PARTITIONS partitions with records in each; {(topic, p): offsets}."""
    with cluster.client(timeout=30) as c:
        c.create_topic(topic, partitions=PARTITIONS, replicas=3)
        written = {}
        for p in range(PARTITIONS):
            records = [Record(b"%s-%d-%d" % (topic.encode(), p, i)) for i in range(per_partition)]
            result = c.append(records, topic=topic, partition=p, details=True)
            written[(topic, p)] = set(range(result.first_offset, result.last_offset + 1))
    return written


def drain(*consumers: Consumer, rounds: int = 5) -> list[Record]:
    """Poll each consumer until `rounds` polls in a row find nothing."""
    out: list[Record] = []
    quiet = 0
    while quiet < rounds:
        got = [r for c in consumers for r in c.poll(1000, 0.2)]
        out += got
        quiet = 0 if got else quiet + 1
    return out


def consumed_all(rows: list[dict], written: dict[tuple, set[int]]) -> bool:
    """Every written record lies below its partition's committed position."""
    last = {tp: max(offsets) for tp, offsets in written.items()}
    return all(
        r["committed"] is not None and r["committed"] > last[(r["topic"], r["partition"])]
        for r in rows
    )


def keys(records: list[Record]) -> list[tuple]:
    return [(r.topic, r.partition, r.offset) for r in records]


# The tests marked so use a topic and a group of their own, and stop no node: one cluster
# serves them all.
@pytest.mark.shares_cluster
def test_members_share_the_partitions_and_a_member_that_commits_leaves_no_duplicate(cluster):
    written = fill(cluster, "billed")
    with Consumer(cluster.brokers, "billing", ["billed"], session_timeout=5.0) as a:
        assert a.assignment() == [("billed", p) for p in range(PARTITIONS)]
        first = a.poll(30, 5.0)
        assert first, "a sole member is given every partition"
        a.commit()
        with Consumer(cluster.brokers, "billing", ["billed"], session_timeout=5.0) as b:
            wait_until(
                lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 20, "a rebalance"
            )
            assert set(a.assignment()).isdisjoint(b.assignment())
            from_a, from_b = drain(a), drain(b)
            a.commit()
            b.commit()
        # b left (committing first): a is given every partition again, with nothing to read.
        wait_until(lambda: len(a.assignment()) == PARTITIONS, 20, "a takes b's partitions back")
        assert drain(a, rounds=3) == [], "b committed before it stopped: no duplicate"
        a.commit()
    seen = keys(first + from_a + from_b)
    assert len(seen) == len(set(seen)), "a graceful rebalance delivers nothing twice"
    assert {(t, p, o) for (t, p), offsets in written.items() for o in offsets} == set(seen)
    with cluster.client() as c:
        described = c.describe_group("billing")
        assert described["members"] == []
        assert consumed_all(described["partitions"], written)


MEMBER_SCRIPT = """
import sys, time
from quorumlog import Consumer
with Consumer(sys.argv[1], "crashy", [sys.argv[2]], session_timeout=2.0) as c:
    while True:
        got = c.poll(1000, 0.2)
        c.commit()
        print(len(c.assignment()), flush=True)
"""


@pytest.mark.shares_cluster  # the member killed is a client's process, not a node
def test_a_killed_members_partitions_move_after_its_session_timeout(cluster):
    fill(cluster, "crashed")
    member = subprocess.Popen(
        [sys.executable, "-c", MEMBER_SCRIPT, cluster.brokers, "crashed"], stdout=subprocess.PIPE
    )
    try:
        assert member.stdout is not None
        while (line := member.stdout.readline()) and int(line) != PARTITIONS:
            pass
        assert line, "the member process ended before it consumed every partition"
        with Consumer(cluster.brokers, "crashy", ["crashed"], session_timeout=2.0) as b:
            wait_until(lambda: len(b.assignment()) == 2, 20, "the newcomer gets its share")
            member.send_signal(signal.SIGKILL)
            member.wait()
            wait_until(lambda: len(b.assignment()) == PARTITIONS, 20, "b takes every partition")
            assert drain(b) == [], "the killed member committed all it read"
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()


def test_commits_survive_a_coordinator_failover(cluster):
    written = fill(cluster, per_partition=200)
    partition = groups_partition("ledger", GROUPS_PARTITIONS)
    committed = {}
    with Consumer(cluster.brokers, "ledger", ["events"], session_timeout=10.0) as a:
        for _ in range(3):
            assert a.poll(50, 5.0)
            a.commit()
        with cluster.client(timeout=20) as c:
            committed = {
                (r["topic"], r["partition"]): r["committed"]
                for r in c.describe_group("ledger")["partitions"]
            }
            coordinator = c.describe_topic(GROUPS_TOPIC)[partition]["leader_id"]
        cluster.kill(coordinator)
        # The member carries on with the new coordinator: polls, commits, no rejoin needed.
        rest = drain(a)
        a.commit()
    with cluster.client(timeout=20) as c:
        after = {(r["topic"], r["partition"]): r for r in c.describe_group("ledger")["partitions"]}
        assert c.describe_topic(GROUPS_TOPIC)[partition]["leader_id"] != coordinator
    for tp, position in committed.items():
        if position is not None:
            assert after[tp]["committed"] >= position, "a committed position never goes back"
    assert consumed_all(list(after.values()), written)
    firsts: dict[tuple, int] = {}
    for r in rest:
        firsts.setdefault((r.topic, r.partition), r.offset)
    for tp, first in firsts.items():
        # A partition not polled yet was committed at 0, where its first record is.
        assert first == committed[tp], f"{tp}: the member went on from where it was"


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=timeout)


@pytest.mark.shares_cluster
def test_the_command_line_consumes_in_a_group_lists_describes_and_resets(cluster):
    written = fill(cluster, "clied", per_partition=5)
    b = ["-b", cluster.brokers]
    first = cli("consume", *b, "--topic", "clied", "--group", "cli", "--max", "7")
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == 7
    rest = cli("consume", *b, "--topic", "clied", "--group", "cli")
    assert rest.returncode == 0, rest.stderr
    values = first.stdout.splitlines() + rest.stdout.splitlines()
    assert sorted(values) == sorted(b"clied-%d-%d" % (p, i) for p in range(4) for i in range(5))
    listed = cli("group", *b, "list")  # with the other tests' groups
    assert "cli stream 0" in listed.stdout.decode().splitlines()
    rows = [
        json.loads(line)
        for line in cli("group", *b, "describe", "cli", "--json").stdout.splitlines()
    ]
    assert [(r["topic"], r["partition"], r["owner"]) for r in rows] == [
        ("clied", p, None) for p in range(PARTITIONS)
    ]
    assert consumed_all(rows, written)
    # "end" is the last record's offset (as `topic describe`), "next_offset" Kafka's end.
    assert all(
        r["lag"] == r["next_offset"] - r["committed"] == r["end"] + 1 - r["committed"] for r in rows
    )
    text = cli("group", *b, "describe", "cli").stdout.decode().splitlines()
    assert [line.split()[:2] for line in text] == [["clied", str(p)] for p in range(PARTITIONS)]
    assert all(len(line.split()) == 6 and line.split()[-1] == "-" for line in text)
    with Consumer(cluster.brokers, "cli", ["clied"]):
        refused = cli("group", *b, "reset-offsets", "cli", "--topic", "clied", "--to", "earliest")
        assert refused.returncode == 1 and b"active member" in refused.stderr
    reset = cli("group", *b, "reset-offsets", "cli", "--topic", "clied", "--to", "earliest")
    assert reset.returncode == 0, reset.stderr
    again = cli("consume", *b, "--topic", "clied", "--group", "cli")
    assert sorted(again.stdout.splitlines()) == sorted(values), "read again from the start"
    with cluster.client() as c:

        def lag_in_status():
            rows = [r for s in c.status() for r in s.get("groups", []) if r["group"] == "cli"]
            known = all(r["end"] is not None for r in rows)
            return len(rows) == PARTITIONS and known and consumed_all(rows, written)

        wait_until(lag_in_status, 20, "the coordinator's status shows the group's lag")
    missing = cli("group", *b, "describe", "nobody")
    assert missing.returncode == 1 and b"unknown group" in missing.stderr


@pytest.mark.shares_cluster
def test_a_group_consumer_stopped_with_sigterm_leaves_its_group_at_once(cluster):
    fill(cluster, "termed", per_partition=5)
    b = ["-b", cluster.brokers]
    args = [*QUORUMLOG, "consume", *b, "--topic", "termed", "--group", "term", "--follow"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline(), "it consumed"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    # Gone from the group now, not after its session timeout: the offsets can be reset.
    reset = cli("group", *b, "reset-offsets", "term", "--topic", "termed", "--to", "earliest")
    assert reset.returncode == 0, reset.stderr


def test_many_groups_started_at_once_on_a_new_cluster_all_consume(cluster):
    """Their first calls race to create `__groups`: the ones that lose find it made, they
    are not refused (100 groups at once failed with "topic '__groups' exists")."""
    fill(cluster, per_partition=1)

    async def one(group: str, got: dict) -> None:
        async with AsyncConsumer(cluster.brokers, group, ["events"], start="earliest") as c:
            while not (records := await c.poll(max_records=10, timeout=1.0)):
                pass
            got[group] = len(records)

    async def main() -> dict:
        got: dict = {}
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(one, f"g{i}", got)
        return got

    assert len(trio.run(main)) == 50


@pytest.mark.shares_cluster
def test_bad_group_calls_get_a_clear_error_and_change_nothing(cluster):
    fill(cluster, "refused", per_partition=5)
    with pytest.raises(UnknownTopicError), Consumer(cluster.brokers, "g", ["no-such-topic"]):
        pass
    with (
        pytest.raises(QuorumLogError, match="session timeout"),
        Consumer(cluster.brokers, "g", ["refused"], session_timeout=0),
    ):
        pass
    with Consumer(cluster.brokers, "g", ["refused"]) as member, cluster.client() as c:
        assert len(drain(member)) == 5 * PARTITIONS
        with pytest.raises(QuorumLogError, match="past its end"):
            c.group_call("commit", "g", member=member.member, offsets=[["refused", 0, 10**6]])
        with pytest.raises(NotMemberError):
            c.group_call("commit", "g", member="stranger", offsets=[["refused", 0, 1]])
        with (
            pytest.raises(QuorumLogError, match="same topics"),
            Consumer(cluster.brokers, "g", ["default"]),
        ):
            pass
        member.commit()
        positions = {r["partition"]: r["committed"] for r in c.describe_group("g")["partitions"]}
        assert positions == {p: 5 for p in range(PARTITIONS)}, "after the 5 records"
        assert c.status(), "every node still answers"


def groups_listed(b: list[str]) -> list[str]:
    """The names `group list` prints (the other tests' groups among them)."""
    listed = cli("group", *b, "list")
    assert listed.returncode == 0, listed.stderr
    return [line.split()[0] for line in listed.stdout.decode().splitlines()]


def join(cluster, group: str, mode: str, topic: str) -> None:
    with Consumer(cluster.brokers, group, [topic], mode=mode, timeout=5) as member:
        member.poll(timeout=1.0)


@pytest.mark.shares_cluster
def test_an_operator_deletes_a_finished_group_and_cannot_create_one_by_mistake(cluster):
    """`group delete` is refused while members are active, then removes the group and its
    positions; `reset-offsets` of a group that does not exist is refused (it used to make
    one); joining a group in the other mode is refused, naming the group's mode."""
    written = fill(cluster, "finished", per_partition=5)
    b = ["-b", cluster.brokers]
    typo = cli("group", *b, "reset-offsets", "bilings", "--topic", "finished", "--to", "earliest")
    assert typo.returncode == 1 and b"unknown group 'bilings'" in typo.stderr
    assert "bilings" not in groups_listed(b), "the typo made no group"
    with Consumer(cluster.brokers, "done", ["finished"], start="earliest") as member:
        got = []
        while len(got) < sum(map(len, written.values())):
            got += member.poll(timeout=1.0)
        member.commit()
        with pytest.raises(
            QuorumLogError, match="'done' is a stream-mode group: join it in stream"
        ):
            join(cluster, "done", "queue", "finished")
        refused = cli("group", *b, "delete", "done")
        assert refused.returncode == 1 and b"active member" in refused.stderr
    with pytest.raises(QuorumLogError, match="stream-mode group"):  # positions kept, no member
        join(cluster, "done", "queue", "finished")
    deleted = cli("group", *b, "delete", "done")
    assert deleted.returncode == 0, deleted.stderr
    assert "done" not in groups_listed(b)
    gone = cli("group", *b, "describe", "done")
    assert gone.returncode == 1 and b"unknown group 'done'" in gone.stderr
    # The name is free again, in either mode, with no position kept from before.
    with Consumer(cluster.brokers, "done", ["finished"], mode="queue", start="earliest") as again:
        first = []
        while not first:
            first = again.poll(timeout=1.0)
        for p in {r.partition for r in first}:  # each from its first record again
            got_here = [r.offset for r in first if r.partition == p]
            assert min(got_here) == min(written[("finished", p)])
