"""Whose disk is slow (actors/services/disk_health.py): plain state, times passed in."""

from __future__ import annotations

from quorumlog.actors.services.disk_health import UNKNOWN_US, DiskHealth
from quorumlog.raft.settings import RaftSettings

SETTINGS = RaftSettings(
    slow_fsync_factor=4.0, slow_fsync_min_s=0.01, slow_fsync_for_s=2.0, slow_fsync_cooldown_s=60.0
)


def health_with_peers(peer_us: int = 1000) -> DiskHealth:
    health = DiskHealth(1, SETTINGS)
    for peer in (2, 3):
        health.peer_reported(peer, peer_us, 0.0)
    return health


def run_disk(health: DiskHealth, latency_s: float, start: float, end: float, peer_us=1000):
    """This node's flush passes of `latency_s` back to back, the peers reporting theirs."""
    now = start
    while now < end:
        health.pass_started(now)
        now += latency_s
        health.pass_ended(latency_s, now)
        for peer in (2, 3):
            health.peer_reported(peer, peer_us, now)


def test_a_disk_slower_than_the_others_for_long_enough_hands_leadership_over():
    health = health_with_peers()
    run_disk(health, 0.001, 0.0, 1.0)
    assert not health.avoided(1, 1.0)
    run_disk(health, 0.05, 1.0, 2.5)
    assert not health.should_hand_over(2.5), "not for long enough yet"
    assert not health.avoided(1, 2.5) and health.to_json(2.5)["1"]["slow_disk"] is False
    run_disk(health, 0.05, 2.5, 4.0)
    assert health.should_hand_over(4.0) and health.avoided(1, 4.0)
    assert health.to_json(4.0)["1"]["slow_disk"] is True


def test_a_disk_slow_for_a_second_in_ten_never_hands_over():
    health = health_with_peers()
    for cycle in range(6):
        start = cycle * 10.0
        run_disk(health, 0.001, start, start + 9.0)
        assert not health.should_hand_over(start + 9.0)
        run_disk(health, 0.05, start + 9.0, start + 10.0)
        assert not health.should_hand_over(start + 10.0)
        assert not health.avoided(1, start + 10.0), "a blip: nothing to act on"


def test_when_every_disk_is_slow_none_is():
    health = health_with_peers(peer_us=50_000)
    run_disk(health, 0.05, 0.0, 3.0, peer_us=50_000)
    assert not health.avoided(1, 3.0) and not health.should_hand_over(3.0)


def test_fast_disks_that_differ_by_a_millisecond_are_not_slow():
    health = health_with_peers(peer_us=100)
    run_disk(health, 0.004, 0.0, 3.0, peer_us=100)  # 40 times slower, but 4 ms
    assert not health.avoided(1, 3.0)


def test_a_stalled_fsync_counts_while_it_lasts():
    health = health_with_peers()
    run_disk(health, 0.001, 0.0, 1.0)
    health.pass_started(1.0)
    for now in (1.5, 2.0, 3.0, 3.5):
        for peer in (2, 3):
            health.peer_reported(peer, 1000, now)
        health.judge(now)
    assert health.should_hand_over(3.5), "no pass ended for 2.5 s"


def test_an_avoided_disk_stays_avoided_until_healthy_for_the_cooldown():
    health = health_with_peers()
    run_disk(health, 0.05, 0.0, 3.0)
    run_disk(health, 0.001, 3.0, 62.0)
    assert not health.should_hand_over(62.0)
    assert health.avoided(1, 62.0), "healthy again, but not for 60 s yet"
    run_disk(health, 0.001, 62.0, 64.0)
    assert not health.avoided(1, 64.0)


def test_a_peers_slow_disk_is_seen_and_the_fastest_healthy_peer_chosen():
    health = DiskHealth(1, SETTINGS)
    now = 0.0
    while now < 3.0:
        health.peer_reported(2, 60_000, now)
        health.peer_reported(3, 2_000, now)
        health.peer_reported(4, 1_000, now)
        run_disk_only_self(health, 0.001, now, now + 0.1)
        now += 0.1
    assert health.avoided(2, now) and not health.avoided(3, now)
    assert health.fastest([2, 3, 4], now) == 4
    assert health.fastest([2, 3], now) == 3
    assert health.fastest([2], now) is None
    assert health.fastest([5], now) == 5, "a peer never heard of has nothing against it"


def run_disk_only_self(health: DiskHealth, latency_s: float, start: float, end: float):
    now = start
    while now < end:
        health.pass_started(now)
        now += latency_s
        health.pass_ended(latency_s, now)


def test_figures_not_heard_lately_are_not_compared():
    health = DiskHealth(1, SETTINGS)
    health.peer_reported(2, 100, 0.0)
    health.peer_reported(3, UNKNOWN_US, 0.0)
    run_disk_only_self(health, 0.05, 10.0, 11.0)
    assert not health.avoided(1, 11.0), "node 2's figure is 10 s old, node 3 has none"
    assert health.own_latency_us(11.0) > 40_000
    assert DiskHealth(1, SETTINGS).own_latency_us(11.0) == UNKNOWN_US


def stall_every(
    health: DiskHealth, stall_s: float, period_s: float, start: float, end: float, peer_us
):
    """This process stood still `stall_s` in every `period_s` (fast flushes between), the
    peers reporting `peer_us` (their stalls, when they stall too)."""
    now = start
    while now < end:
        run_disk(health, 0.001, now, now + period_s - stall_s, peer_us=peer_us)
        now += period_s
        health.process_stalled(stall_s, now)
        health.judge(now)


def test_a_process_starved_alone_is_slow_and_says_so_to_its_peers():
    health = health_with_peers()
    stall_every(health, 0.2, 0.4, 0.0, 1.0, peer_us=1000)
    assert not health.avoided(1, 1.0), "two stalls: a collector's pause, say"
    stall_every(health, 0.2, 0.4, 1.0, 4.0, peer_us=1000)
    assert health.should_hand_over(4.0) and health.avoided(1, 4.0)
    assert health.own_latency_us(4.0) >= 200_000, "its peers avoid it too"
    run_disk(health, 0.001, 4.0, 10.0)
    assert health.own_latency_us(10.0) < 10_000, "no stall within the window: its disk's figure"


def test_processes_that_all_stall_together_move_nothing():
    """A machine short of CPU for every node: handing leaderships to peers as starved only
    spent the CPU they lacked (a 1,000-partition cluster elected for minutes)."""
    health = health_with_peers(peer_us=250_000)
    stall_every(health, 0.25, 0.5, 0.0, 6.0, peer_us=250_000)
    assert not health.should_hand_over(6.0) and not health.avoided(1, 6.0)
