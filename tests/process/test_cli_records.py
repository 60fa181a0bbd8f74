"""`consume` and `produce` with whole records, as a user runs them against a real cluster:
every partition (`--partition all`), keys, headers, timestamps and partitions shown
(`--format`), JSON lines that round-trip through `produce --format json`, and `-H` headers."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from quorumlog import Record
from quorumlog.cli.localcluster import QUORUMLOG
from quorumlog.client.partitioner import partition_of_key


def ql(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], input=input, capture_output=True, timeout=timeout)


def ok(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    out = ql(*args, input=input)
    assert out.returncode == 0, out.stderr
    return out


# One cluster for the module: each test uses topics of its own.
pytestmark = pytest.mark.shares_cluster


def test_consume_partition_all_prints_every_record_of_a_keyed_topic(cluster):
    b = cluster.brokers
    ok("topic", "-b", b, "create", "keyed", "--partitions", "6")
    lines = [b"user-%d:value-%d" % (i, i) for i in range(60)]
    ok("produce", "-b", b, "--topic", "keyed", "--key-separator", ":", input=b"\n".join(lines))
    values = sorted(b"value-%d" % i for i in range(60))

    every = ok("consume", "-b", b, "--topic", "keyed", "--partition", "all")
    assert sorted(every.stdout.splitlines()) == values
    assert every.stderr == b"", "no note when every partition is read"

    shown = ok("consume", "-b", b, "--topic", "keyed", "--partition", "all", "--format", "%p %o %k")
    offsets: dict[int, list[int]] = {}
    for row in shown.stdout.splitlines():
        partition, offset, key = row.split(b" ")
        assert int(partition) == partition_of_key(key, 6), "each record shows its partition"
        offsets.setdefault(int(partition), []).append(int(offset))
    assert sum(map(len, offsets.values())) == 60
    assert len(offsets) > 1, "60 keys land in more than one of 6 partitions"
    for partition, seen in offsets.items():
        assert seen == list(range(len(seen))), f"partition {partition} in offset order"

    some = ok("consume", "-b", b, "--topic", "keyed", "--partition", "all", "--max", "7")
    assert len(some.stdout.splitlines()) == 7
    latest = ok("consume", "-b", b, "--topic", "keyed", "--partition", "all", "--from", "latest")
    assert latest.stdout == b""
    # --from OFFSET with all: that offset in each partition.
    from1 = ok("consume", "-b", b, "--topic", "keyed", "--partition", "all", "--from", "1")
    assert len(from1.stdout.splitlines()) == 60 - len(offsets)


def test_consume_partition_all_follows_every_partition(cluster):
    b = cluster.brokers
    ok("topic", "-b", b, "create", "followed", "--partitions", "6")
    args = ["consume", "-b", b, "--topic", "followed", "--partition", "all", "--follow"]
    with subprocess.Popen(
        [*QUORUMLOG, *args, "--format", "%k"], stdout=subprocess.PIPE
    ) as follower:
        stop = threading.Timer(60, follower.terminate)  # then readline sees the end
        stop.start()
        try:
            time.sleep(1)  # most likely waiting already: from earliest, no record is missed
            lines = b"".join(b"key-%d:v\n" % i for i in range(24))
            ok("produce", "-b", b, "--topic", "followed", "--key-separator", ":", input=lines)
            seen = {follower.stdout.readline().strip() for _ in range(24)}
            assert seen == {b"key-%d" % i for i in range(24)}
        finally:
            stop.cancel()
            follower.terminate()


def test_consume_without_partition_notes_the_others_on_stderr_only(cluster):
    b = cluster.brokers
    ok("topic", "-b", b, "create", "noted", "--partitions", "6")
    with cluster.client() as c:
        for p in range(6):
            c.append([b"p%d-a" % p, b"p%d-b" % p], topic="noted", partition=p)
    out = ok("consume", "-b", b, "--topic", "noted", "--with-offsets")
    assert out.stdout == b"0\tp0-a\n1\tp0-b\n", "stdout is partition 0's, as before"
    assert out.stderr.decode().splitlines() == [
        "reading partition 0 of 6 (--partition all reads every one)"
    ]
    explicit = ok("consume", "-b", b, "--topic", "noted", "--partition", "0")
    assert (explicit.stdout, explicit.stderr) == (b"p0-a\np0-b\n", b"")
    ok("produce", "-b", b, input=b"one\n")
    single = ok("consume", "-b", b)
    assert single.stderr == b"", "a topic of one partition: nothing to note"


def test_json_lines_round_trip_keys_values_and_headers_through_produce(cluster):
    b = cluster.brokers
    ok("topic", "-b", b, "create", "source", "--partitions", "3")
    ok("topic", "-b", b, "create", "copy", "--partitions", "3")
    written = [
        Record(b"plain", key=b"k1", headers=[("origin", b"web")]),
        Record(b"\x00\xff\xfe not utf-8", key=b"\xc3\x28", headers=[("raw", b"\x80\x81")]),
        Record("café ✓".encode(), key=None, timestamp_ms=1_700_000_000_123),
        Record(b"", key=b"", headers=[("a", b""), ("a", b"again")]),
        Record(b'{"json": "inside"}\nwith a newline', key=b"k2"),
    ]
    with cluster.client() as c:
        for i, record in enumerate(written):
            c.append([record], topic="source", partition=i % 3)

    dumped = ok("consume", "-b", b, "--topic", "source", "--partition", "all", "--format", "json")
    objects = [json.loads(line) for line in dumped.stdout.splitlines()]
    assert len(objects) == len(written)
    binary = next(o for o in objects if o["key"] == {"base64": "wyg="})
    assert binary["value"] == {"base64": "AP/+IG5vdCB1dGYtOA=="}
    assert binary["headers"] == [{"key": "raw", "value": {"base64": "gIE="}}]
    assert {o["topic"] for o in objects} == {"source"}
    assert any(o["key"] is None and o["value"] == "café ✓" for o in objects)
    assert all(
        set(o) == {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}
        for o in objects
    )

    ok("produce", "-b", b, "--topic", "copy", "--format", "json", input=dumped.stdout)
    with cluster.client() as c:

        def everything(topic: str) -> list[tuple]:
            return sorted(
                (
                    r.partition,
                    r.offset,
                    r.key or b"",
                    r.key is None,
                    r.value,
                    r.headers or [],
                    r.timestamp_ms,
                )
                for p in range(3)
                for r in c.read(0, 100, topic=topic, partition=p)
            )

        assert everything("copy") == everything("source")


def test_produce_headers_show_in_a_format(cluster):
    b = cluster.brokers
    ok("topic", "-b", b, "create", "headed", "--partitions", "1")
    ok(
        "produce",
        "-b",
        b,
        "--topic",
        "headed",
        "-H",
        "source=web",
        "-H",
        "trace=a=b",
        "--key-separator",
        ":",
        input=b"alice:1\nbob:2\n",
    )
    shown = ok("consume", "-b", b, "--topic", "headed", "--format", "%h")
    assert shown.stdout == b"source=web,trace=a=b\n" * 2
    kcat = ok("consume", "-b", b, "--topic", "headed", "--format", r"%t/%p@%o %k=%v\n")
    assert kcat.stdout == b"headed/0@0 alice=1\nheaded/0@1 bob=2\n", "kcat's trailing \\n: once"
    named = ok("consume", "-b", b, "--topic", "headed", "--format", "{key}\t{value} {{x}} 100%%")
    assert named.stdout == b"alice\t1 {x} 100%\nbob\t2 {x} 100%\n"
    stamped = ok("consume", "-b", b, "--topic", "headed", "--format", "%T", "--max", "1")
    assert int(stamped.stdout) > 1_700_000_000_000


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("consume", "--format", "%q"), "%q"),
        (("consume", "--format", "{vaule}"), "{vaule}"),
        (("consume", "--format", "%v", "--with-offsets"), "--with-offsets"),
        (("consume", "--partition", "most"), "'all'"),
        (("consume", "--group", "g", "--format", "json"), "--group"),
        (("produce", "-H", "novalue"), "NAME=VALUE"),
        (("produce", "--format", "json", "--key-separator", ":"), "--key-separator"),
    ],
)
def test_bad_formats_and_headers_are_one_line_naming_the_problem_and_exit_2(cluster, args, named):
    out = ql(*args[:1], "-b", cluster.brokers, *args[1:], input=b"x\n")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "--format'" not in lines[0], lines


def test_produce_json_names_the_bad_line(cluster):
    out = ql(
        "produce",
        "-b",
        cluster.brokers,
        "--format",
        "json",
        input=b'{"value": "fine"}\n\n{"value": 3}\n',
    )
    assert out.returncode == 2
    assert out.stderr.decode().startswith("quorumlog: input line 3: "), out.stderr
