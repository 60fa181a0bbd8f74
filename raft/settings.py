"""Timing and size settings of a node, with their defaults (docs/cli.md)."""

from __future__ import annotations

from dataclasses import dataclass

FOLLOWER_FLUSH = ("quorum", "always", "lazy")


@dataclass(frozen=True, slots=True)
class RaftSettings:
    heartbeat_interval_s: float = 0.05
    # Each election timeout is drawn uniformly from [min, max] (Raft paper 5.2).
    election_timeout_min_s: float = 0.3
    election_timeout_max_s: float = 0.6
    # Whole batches of about this many bytes per AppendEntries to a recovering follower
    # (seed 004's recovery chunks).
    chunk_bytes_max: int = 32 * 1024
    # ... and to a follower that keeps up: what arrived since the last message, up to this.
    # A follower further behind than this is recovering. (At 32 KiB, every 64 KiB client
    # batch made its followers "recover": one batch per message, +25% follower CPU.)
    steady_bytes_max: int = 1024 * 1024
    # Bytes of chunks in flight to a recovering follower: the stream (measured with 32 KiB
    # chunks: catch-up 110 MB/s at 8 in flight, 160 at 16, 200 at 32, 270 at 64, 280 at
    # 128). The leader sends while less than this is in flight, at least one message and
    # at most 64 (raft.core.RECOVERY_INFLIGHT_MAX); a batch larger than a chunk is sent
    # whole, so one message may pass the window by a batch.
    recovery_window_bytes: int = 2 * 1024 * 1024
    # AppendEntries in flight to a follower that keeps up: one, so that appends arriving
    # meanwhile share the next message instead of each getting its own (measured: +35%
    # single-record appends/s at window 64 against 8 in flight).
    steady_inflight_max: int = 1
    # Steady state: when followers fsync before replying. "quorum": when the AppendEntries
    # holds entries a caller waits to see committed (acks=quorum appends, configurations),
    # as seed 004 does: one reply per message, sent once durable (measured: +5-9%
    # single-record quorum appends/s against "lazy"); the other entries are flushed in the
    # background and reported after. "always": every AppendEntries (recovery chunks follow
    # recovery_flush_every_chunk); "lazy": none (replies at once, flushes reported after).
    follower_flush: str = "quorum"
    # Recovery: ask the follower to fsync every chunk (the baseline seed 004 improves on).
    recovery_flush_every_chunk: bool = False
    # The leader flushes at once when quorum appends wait, otherwise after this long or
    # this many unflushed bytes.
    leader_flush_interval_s: float = 0.02
    # A follower with no reply for this long gets its in-flight window reset (lost messages).
    retransmit_timeout_s: float = 0.2
    # Batches a client append request may carry.
    append_bytes_max: int = 8 * 1024 * 1024
    # Gray failures (actors/services/disk_health.py): a node's disk is slow while its recent fsync
    # latency is above this many times the median of the other nodes' and above
    # slow_fsync_min_s; a leader whose disk stays slow for slow_fsync_for_s hands its
    # groups over, and a node slow within slow_fsync_cooldown_s is not given leadership
    # while a healthy voter can take it.
    slow_fsync_factor: float = 4.0
    slow_fsync_min_s: float = 0.01
    slow_fsync_for_s: float = 2.0
    slow_fsync_cooldown_s: float = 60.0
    # A learner whose log has not advanced for this long while it is not caught up (its
    # node is gone, or an `add` was cut short) is removed by the leader.
    learner_abandon_s: float = 600.0
    # Replica moves a rebalance (actors/cluster/rebalancer.py) has under way at once: each copies a
    # partition's whole log to a new node, beside the clients' traffic.
    rebalance_moves_max: int = 2

    def __post_init__(self) -> None:
        assert 0 < self.heartbeat_interval_s < self.election_timeout_min_s
        assert self.election_timeout_min_s <= self.election_timeout_max_s
        assert self.follower_flush in FOLLOWER_FLUSH, f"follower_flush is one of {FOLLOWER_FLUSH}"
        assert (
            0 < self.chunk_bytes_max <= self.steady_bytes_max
            and min(self.recovery_window_bytes, self.steady_inflight_max) > 0
        )
        assert self.slow_fsync_factor > 1 and self.slow_fsync_min_s > 0
        assert self.learner_abandon_s > 0
        assert self.rebalance_moves_max >= 1, "rebalance_moves_max is at least 1"
