"""What a leader knows of a follower is in one state at a time (etcd's tracker): probing
for the match point, replicating, or recovering in chunks."""

from __future__ import annotations

from quorumlog.raft.progress import Progress, ReplicationState


def test_a_follower_is_probed_then_replicated_to_then_recovered_and_probed_again():
    p = Progress(2, next_offset=10)
    assert p.state is ReplicationState.PROBE and p.probing and not p.recovering
    p.match_offset = 7
    p.sent(9, 100)
    p.matched()
    assert p.state is ReplicationState.REPLICATE and p.next_offset == 8 and not p.inflight
    p.recover(bytes_sent=4096)
    assert p.recovering and not p.probing and p.recovery_started_bytes == 4096
    assert p.to_json()["recovering"] is True
    p.sent(20, 32 * 1024)
    p.probe()  # refused, or lost: one request at a time again, nothing counted in flight
    assert p.state is ReplicationState.PROBE and not p.recovering
    assert (len(p.inflight), p.inflight_bytes) == (0, 0)
