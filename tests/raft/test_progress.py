"""What a leader knows of a follower is in one state at a time (etcd's tracker): probing
for the match point, replicating, or recovering in chunks. The tracker of them answers the
quorum questions: what a majority holds, heard or granted, a joint configuration's two
majorities each."""

from __future__ import annotations

from quorumlog.membership.config import Configuration, JointVoters
from quorumlog.membership.quorum import VoteResult
from quorumlog.raft.progress import Progress, ProgressTracker, ReplicationState

ADDRESSES = {n: f"h:{n}" for n in range(1, 6)}


def _tracked(**match_flushed: tuple[int, int]) -> ProgressTracker:
    """A tracker of followers named n2..n5, each (match, flushed)."""
    tracker = ProgressTracker()
    for name, (match, flushed) in match_flushed.items():
        tracker.track(Progress(int(name[1:]), 0, match_offset=match, flushed_offset=flushed))
    return tracker


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


def test_the_commit_counts_what_a_majority_matched_and_flushed_the_leader_as_any_other():
    config = Configuration(
        1, frozenset({1, 2, 3}), frozenset(), {n: ADDRESSES[n] for n in (1, 2, 3)}
    )
    tracker = _tracked(n2=(9, 7), n3=(9, 4))
    assert tracker.committed(config, 1, own_durable=3) == 4, "n2 and n3 flushed 4"
    assert tracker.committed(config, 1, own_durable=8) == 7, "n1 and n2 flushed 7"
    assert tracker.majority_offsets(config, 1, own_flushed=3, own_dirty=9) == (4, 9)


def test_a_joint_configuration_commits_and_elects_only_with_both_majorities():
    joint = Configuration(
        2,
        frozenset({1, 2, 3, 4, 5}),
        frozenset(),
        ADDRESSES,
        joint=JointVoters(old=frozenset({1, 2, 3}), new=frozenset({1, 4, 5})),
    )
    tracker = _tracked(n2=(9, 9), n3=(9, 9), n4=(2, 2), n5=(1, 1))
    assert tracker.committed(joint, 1, own_durable=9) == 2, "the new set has 9 on n1 only"
    tracker.start_votes(1)
    tracker.record_vote(2, True)
    tracker.record_vote(3, True)
    assert tracker.vote_result(joint) is VoteResult.PENDING, "the old set alone won"
    tracker.record_vote(4, False)
    tracker.record_vote(5, False)
    assert tracker.vote_result(joint) is VoteResult.LOST
    tracker.reset()
    assert not tracker.votes and not tracker.peers()


def test_a_quorum_heard_from_counts_contacts_within_the_window_and_the_node_itself():
    config = Configuration(
        1, frozenset({1, 2, 3}), frozenset(), {n: ADDRESSES[n] for n in (1, 2, 3)}
    )
    tracker = _tracked(n2=(0, 0), n3=(0, 0))
    assert not tracker.quorum_heard(config, 1, now=10.0, window=1.0), "never heard of"
    tracker.note_contacts({3: 9.5, 4: 9.9})  # n4 is not tracked: ignored
    assert tracker.quorum_heard(config, 1, now=10.0, window=1.0)
    assert not tracker.quorum_heard(config, 1, now=10.6, window=1.0)
    assert tracker.heard_within(10.0, 1.0, may_lead=lambda n: True) == [3]
    assert tracker.heard_within(10.0, 1.0, may_lead=lambda n: n != 3) == []


def test_a_departing_node_is_released_once_it_holds_its_removal_or_its_time_is_up():
    tracker = _tracked(n2=(5, 5), n3=(5, 5), n4=(5, 5))
    tracker.get(3).departing_until_s = 20.0
    tracker.get(4).departing_until_s = 20.0
    tracker.get(4).commit_offset = 7
    tracker.release_departed(committed_config_offset=7, now=10.0)
    assert list(tracker.peers()) == [2, 3], "n4 holds the removal; n2 is a member"
    tracker.release_departed(committed_config_offset=7, now=20.0)
    assert list(tracker.peers()) == [2]
