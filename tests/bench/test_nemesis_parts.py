"""The fault harness's own parts: a checker that misses a lost write, or a proxy that does
not cut, would make every nemesis run pass for nothing."""

from __future__ import annotations

import random

import trio

from quorumlog.bench import faults
from quorumlog.bench.history import DEFAULT_PART, Append, History, Part, check
from quorumlog.bench.proxy import Links, serve_front
from quorumlog.cli.localcluster import free_ports
from quorumlog.log.files import OsFileSystem, SyncJournal
from quorumlog.transport.codec import encode_frame
from quorumlog.transport.messages import Hello, Role, StatusRequest


def _history(*appends: Append) -> History:
    history = History()
    history.appends.extend(appends)
    return history


def _ok(value: bytes, offset: int, acks: str = "quorum", part: Part = DEFAULT_PART) -> Append:
    return Append(value, acks, 0.0, 0.1, "ok", offset, *part)


LOG = [(0, b"a"), (1, b"b"), (3, b"c")]  # a hole at 2: the checker goes by the log's offsets
A0, A1 = Part("nemesis-a", 0), Part("nemesis-a", 1)


def _logs(*replicas: list) -> dict:
    """`default`'s logs on nodes 1, 2, ..."""
    return {DEFAULT_PART: {i: log for i, log in enumerate(replicas, 1)}}


def test_a_clean_history_passes():
    history = _history(_ok(b"a", 0), _ok(b"b", 1), _ok(b"c", 3))
    history.saw_records(1, DEFAULT_PART, [(0, b"a"), (1, b"b"), (3, b"c")])
    figures = check(history, _logs(LOG, list(LOG)))
    assert figures["violations"] == []
    assert figures["quorum_acked"] == 3 and figures["quorum_lost"] == 0


def test_a_lost_or_moved_quorum_write_is_a_violation():
    lost = check(_history(_ok(b"z", 4)), _logs(LOG))
    assert any("I1" in v and "lost" in v for v in lost["violations"])
    moved = check(_history(_ok(b"c", 2)), _logs(LOG))
    assert any("I1" in v and "sits at 3" in v for v in moved["violations"])


def test_leader_and_none_losses_are_figures_not_violations():
    figures = check(_history(_ok(b"z", 4, "leader"), _ok(b"y", None, "none")), _logs(LOG))
    assert figures["violations"] == []
    assert figures["leader_lost"] == 1 and figures["none_lost"] == 1


def test_duplicates_divergence_and_reader_faults_are_violations():
    assert any("I3" in v for v in check(_history(), _logs([*LOG, (4, b"a")]))["violations"])
    assert any("I2" in v for v in check(_history(), _logs(LOG, LOG[:2]))["violations"])
    skipped = _history()
    skipped.saw_records(1, DEFAULT_PART, [(0, b"a"), (3, b"c")])  # offset 1 holds data
    assert any("I4" in v for v in check(skipped, _logs(LOG))["violations"])
    vanished = _history()
    vanished.saw_records(2, DEFAULT_PART, [(0, b"a"), (1, b"x")])
    assert any("I5" in v for v in check(vanished, _logs(LOG))["violations"])
    history = _history()
    history.saw_records(1, DEFAULT_PART, [(1, b"b")])
    history.saw_records(1, DEFAULT_PART, [(0, b"a")])
    assert any("I4" in v for v in history.violations), "a reader going back"
    history.saw_leader(DEFAULT_PART, 5, 1)
    history.saw_leader(DEFAULT_PART, 5, 2)
    assert any("I6" in v for v in history.violations)


def test_a_clean_history_over_partitions_passes_with_totals_and_per_partition_figures():
    # The same offsets and even the same values in two partitions: each has its own log.
    other = [(0, b"x"), (1, b"y")]
    history = _history(_ok(b"a", 0), _ok(b"b", 1), _ok(b"c", 3, part=A0), _ok(b"x", 0, part=A1))
    history.saw_records(1, A0, LOG)
    history.saw_records(2, A1, other)
    history.saw_records(1, DEFAULT_PART, [(0, b"a")])
    history.saw_leader(A0, 3, 1)
    history.saw_leader(A1, 3, 2)  # the same term in another group: another election
    logs = {DEFAULT_PART: {1: LOG, 2: LOG}, A0: {1: LOG, 3: LOG}, A1: {2: other, 3: other}}
    figures = check(history, logs)
    assert figures["violations"] == [] and history.violations == []
    assert figures["quorum_acked"] == 4 and figures["records_in_log"] == 8
    assert figures["records_read"] == 6
    assert figures["partitions"]["nemesis-a/0"]["quorum_acked"] == 1
    assert figures["partitions"]["nemesis-a/1"]["records_in_log"] == 2


def test_a_violation_in_one_partition_names_that_partition():
    history = _history(_ok(b"a", 0), _ok(b"c", 3, part=A1), _ok(b"z", 4, part=A1))
    history.saw_records(2, A0, [(0, b"a"), (3, b"c")])  # skips offset 1 of nemesis-a/0
    history.saw_leader(A1, 7, 1)
    history.saw_leader(A1, 7, 3)
    logs = {DEFAULT_PART: {1: LOG}, A0: {1: LOG, 2: LOG[:2]}, A1: {1: LOG}}
    violations = check(history, logs)["violations"]
    assert sorted(v.split(":")[0] for v in violations) == [
        "I1 nemesis-a/1",  # b"z" acknowledged, lost
        "I2 nemesis-a/0",
        "I4 nemesis-a/0",
        "I6 nemesis-a/1",
    ]
    assert "node 2" in next(v for v in violations if v.startswith("I4"))


def test_lose_unsynced_keeps_what_fsync_covered(tmp_path):
    data = tmp_path / "node"
    (data / "log").mkdir(parents=True)
    journal = str(data / "sync-journal")
    fs = OsFileSystem(sync_journal=SyncJournal(journal))
    segment = fs.open(str(data / "log" / f"{0:020d}.log"), create=True)
    segment.append(b"x" * 1000)
    segment.fsync()
    segment.append(b"y" * 5000)  # never fsynced
    segment.close()
    assert faults.durable_sizes(journal) == {str(data / "log" / f"{0:020d}.log"): 1000}
    lost = faults.lose_unsynced(str(data), journal, random.Random(3))
    size = (data / "log" / f"{0:020d}.log").stat().st_size
    assert 1000 <= size < 6000 and lost == 6000 - size


def test_the_proxy_cuts_one_direction_and_heals():
    async def main():
        links = Links(random.Random(1))
        front, node_port = free_ports(2)

        async def echo_node(stream):  # echoes frames: both directions of the link carry them
            async for data in stream:
                await stream.send_all(data)

        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(node_port, host="127.0.0.1")
            nursery.start_soon(trio.serve_listeners, echo_node, listeners)
            await nursery.start(serve_front, links, 2, front, node_port)
            stream = await trio.open_tcp_stream("127.0.0.1", front)
            await stream.send_all(encode_frame(0, Hello(1, Role.PEER, 1, b"n" * 16)))
            await stream.receive_some()  # the Hello came back: 1 -> 2 and 2 -> 1 pass
            links.cut_one_way(2, 1)
            await stream.send_all(encode_frame(0, StatusRequest()))
            with trio.move_on_after(0.3) as waited:
                await stream.receive_some()
            assert waited.cancelled_caught, "the echo (2 -> 1) must be dropped"
            assert links.dropped == 1
            links.heal()
            await stream.send_all(encode_frame(0, StatusRequest()))
            with trio.fail_after(5):
                assert await stream.receive_some()
            nursery.cancel_scope.cancel()

    trio.run(main)
