"""Heartbeat batching: one message per peer names every group led towards it; a group
costs its id once the peer confirmed its term and commit, and a lost batch costs a resend."""

from __future__ import annotations

from quorumlog.actors.services.disk_health import DiskHealth
from quorumlog.actors.services.heartbeats import (
    BeatBatcher,
    BeatReceiver,
    HeartbeatManager,
    Led,
    pack_ids,
    unpack_ids,
)
from quorumlog.actors.services.stats import NodeStats
from quorumlog.raft.settings import RaftSettings


def led(**groups: tuple[int, int, tuple[int, ...]]) -> dict[int, Led]:
    return {int(k[1:]): Led(term, commit, peers) for k, (term, commit, peers) in groups.items()}


def test_a_group_costs_its_id_once_the_peer_confirmed_its_state():
    batcher = BeatBatcher()
    groups = led(g1=(3, 10, (2, 3)), g2=(1, 0, (3,)), g3=(5, 7, (2,)))
    seq, ids, full = batcher.batch(2, groups)
    assert ids == [] and full == [[1, 3, 10], [3, 5, 7]], "group 2 is not replicated to node 2"
    batcher.confirmed(2, seq, need_full=[])
    _, ids, full = batcher.batch(2, groups)
    assert (ids, full) == ([1, 3], [])
    groups[1] = Led(3, 11, (2, 3))  # its commit moved
    _, ids, full = batcher.batch(2, groups)
    assert (ids, full) == ([3], [[1, 3, 11]])


def test_a_lost_batch_is_carried_again_until_a_reply_confirms_it():
    batcher = BeatBatcher()
    groups = led(g1=(3, 10, (2,)))
    batcher.batch(2, groups)  # lost: no reply
    seq, ids, full = batcher.batch(2, groups)
    assert (ids, full) == ([], [[1, 3, 10]])
    batcher.confirmed(2, seq, need_full=[])
    assert batcher.batch(2, groups)[1:] == ([1], [])


def test_a_peer_that_lost_its_memory_asks_for_full_entries():
    batcher = BeatBatcher()
    groups = led(g1=(3, 10, (2,)))
    seq, _, _ = batcher.batch(2, groups)
    batcher.confirmed(2, seq, need_full=[])
    receiver = BeatReceiver()  # the peer restarted: it knows no full entry
    seq, ids, full = batcher.batch(2, groups)
    beats, known, unknown = receiver.receive(1, ids, full)
    assert (beats, known, unknown) == ([], [], [1])
    batcher.confirmed(2, seq, need_full=unknown)
    _, ids, full = batcher.batch(2, groups)
    beats, known, unknown = receiver.receive(1, ids, full)
    assert [(b.group, b.term, b.leader_id, b.leader_commit) for b in beats] == [(1, 3, 1, 10)]
    assert receiver.heartbeat(1, 1) == beats[0], "ids read back as the last full entry"


def test_groups_no_longer_led_leave_the_batches():
    batcher = BeatBatcher()
    groups = led(g1=(3, 10, (2,)), g2=(3, 4, (2,)))
    seq, _, _ = batcher.batch(2, groups)
    batcher.confirmed(2, seq, need_full=[])
    del groups[2]
    assert batcher.batch(2, groups)[1:] == ([1], [])


def test_ids_travel_as_an_int64_array():
    ids = [0, 1, 2**40, 17]
    assert unpack_ids(pack_ids(ids)) == ids
    assert len(pack_ids(range(1000))) == 8000


def test_a_forgotten_group_keeps_no_entry_and_its_id_is_unknown_again():
    """A group deleted here leaves nothing behind (issue 51); made here again, its id is
    unknown, so its leader sends a full entry."""
    receiver = BeatReceiver()
    receiver.receive(1, [], [[7, 3, 10]])
    receiver.receive(2, [], [[7, 4, 12]])
    receiver.forget(7)
    assert receiver._full == {}
    assert receiver.receive(1, [7], []) == ([], [], [7])


def test_a_quiet_leader_that_stepped_down_is_no_longer_watched():
    """The node's heartbeat task died (KeyError) when a quiet leader stepped down in a round
    that did not wake it and its peers then fell silent."""
    manager = HeartbeatManager(
        1,
        RaftSettings(),
        dict,
        lambda peer, message: None,
        NodeStats(),
        DiskHealth(1, RaftSettings()),
    )
    manager.leading(7, term=2, commit_offset=5, peers=(2, 3))
    manager.quiet_leader(7)
    manager.not_leading(7)
    manager._watch_peers(now=100.0)  # both peers silent: nothing of group 7 is left to wake
