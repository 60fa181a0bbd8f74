"""Gray failures: whose disk is the slow one, and leadership moved away from it.

Every node keeps a recent fsync latency for itself (its flusher's passes, smoothed; a pass
still running counts for as long as it runs, so a stalled disk is slow, not silent) and for
each peer it exchanges heartbeat batches with: both the batches and their replies carry the
sender's own figure. A starved process (actors/services/stall_watch.py) counts as a slow disk: while
STALLS_MIN stalls fall within STALL_WINDOW_S, its figure is at least the longest of them. A
node is *slow* while its figure is above `slow_fsync_min_s` and above `slow_fsync_factor`
times the median of the other nodes' figures. So a cluster whose disks are all slow has
none slow, nor one whose processes all stall together (a machine short of CPU for all of
them: were each to hand its leaderships away, they would bounce between the nodes, and the
moves cost the CPU they lack), and a node with no figures to compare has none.

What follows from it (TiKV evicts leaders from slow stores the same way):
- a leader whose own disk stayed slow for `slow_fsync_for_s` hands each group it leads to
  the caught-up voter with the fastest disk (`hand_over_from_slow_disk`);
- a node that was slow that long within the last `slow_fsync_cooldown_s` is *avoided*:
  never a target of such a hand-over or of the leader balancer (its peers know it from its
  figure), and its own campaigns start an election timeout late, so that a healthy voter
  wins first (it still wins when no healthy one can: no availability is given up).
  Shorter slowness (a burst of writes, a node starting, a disk slow a second in every ten)
  changes nothing, and a disk that stays slow moves leadership once.

`DiskHealth` is plain state (no trio, no clock: times are passed in); the node's leader
balancing applies it to its groups (actors/node/leader_balance.py).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

import structlog

from quorumlog.raft.settings import RaftSettings

logger = structlog.get_logger("quorumlog.disk_health")

EWMA_WEIGHT = 0.3  # of each new flush pass: a change of disk speed shows within a few passes
REPORT_STALE_S = 5.0  # a peer's figure older than this is not compared with
CHECK_INTERVAL_S = 0.25
UNKNOWN_US = -1  # on the wire: no fsync measured yet
# A process starved: this many stalls within this window (one or two may be a collector's
# pause or a burst of load on a busy machine).
STALLS_MIN = 3
STALL_WINDOW_S = 5.0


@dataclass(slots=True)
class Disk:
    """One node's disk as this node knows it."""

    latency_s: float = 0.0
    heard_s: float = -math.inf  # when the figure was last measured or reported
    slow_since_s: float | None = None  # slow without a break since then
    last_slow_s: float = -math.inf

    def to_json(self, now: float, cooldown_s: float) -> dict:
        return {
            "fsync_ms": round(self.latency_s * 1000, 3),
            "slow_disk": now - self.last_slow_s < cooldown_s,
        }


class DiskHealth:
    def __init__(self, node_id: int, settings: RaftSettings):
        self.node_id = node_id
        self._settings = settings
        self.disks: dict[int, Disk] = {node_id: Disk()}
        self._pass_started_s: float | None = None
        self._judged_s = -math.inf
        # (when, seconds) of this process's last stalls (actors/services/stall_watch.py)
        self._stalls: deque[tuple[float, float]] = deque(maxlen=STALLS_MIN)

    # ----------------------------------------------------------------------- inputs

    def pass_started(self, now: float) -> None:
        self._pass_started_s = now

    def pass_ended(self, latency_s: float, now: float) -> None:
        self._pass_started_s = None
        own = self.disks[self.node_id]
        if own.heard_s == -math.inf:
            own.latency_s = latency_s
        else:
            own.latency_s += EWMA_WEIGHT * (latency_s - own.latency_s)
        own.heard_s = now
        if now - self._judged_s >= CHECK_INTERVAL_S:
            # Not after every pass (one per quorum append at low load): slowness that
            # counts lasts seconds, and judging compares medians of every node's figure.
            self.judge(now)

    def process_stalled(self, stood_still_s: float, now: float) -> None:
        self._stalls.append((now, stood_still_s))

    def _starved_s(self, now: float) -> float:
        """The longest of this process's last STALLS_MIN stalls while they all fall within
        STALL_WINDOW_S (a starved process), else 0."""
        stalls = self._stalls
        if len(stalls) < STALLS_MIN or now - stalls[0][0] >= STALL_WINDOW_S:
            return 0.0
        return max(stood_still_s for _, stood_still_s in stalls)

    def peer_reported(self, peer: int, latency_us: int, now: float) -> None:
        if latency_us == UNKNOWN_US or peer == self.node_id:
            return
        disk = self.disks.setdefault(peer, Disk())
        disk.latency_s = latency_us / 1e6
        disk.heard_s = now

    def judge(self, now: float) -> None:
        """Decide who is slow now (after new figures, and every check: a stalled pass)."""
        self._judged_s = now
        s = self._settings
        latencies = {
            n: self._latency_s(n, now)
            for n, d in self.disks.items()
            if now - d.heard_s < REPORT_STALE_S or n == self.node_id
        }
        for node_id, disk in self.disks.items():
            others = [latency for n, latency in latencies.items() if n != node_id]
            slow = (
                node_id in latencies
                and bool(others)
                and latencies[node_id]
                > max(s.slow_fsync_min_s, s.slow_fsync_factor * statistics.median(others))
            )
            if not slow:
                disk.slow_since_s = None
                continue
            if disk.slow_since_s is None:
                disk.slow_since_s = now
            if now - disk.slow_since_s < s.slow_fsync_for_s:
                continue  # a blip (a burst of writes, a start): nothing to act on
            if now - disk.last_slow_s >= s.slow_fsync_cooldown_s:
                logger.warning(
                    "slow_disk",
                    node_id=self.node_id,
                    disk_of=node_id,
                    fsync_ms=round(latencies[node_id] * 1000, 1),
                )
            disk.last_slow_s = now

    def _latency_s(self, node_id: int, now: float) -> float:
        latency = self.disks[node_id].latency_s
        if node_id != self.node_id:
            return latency
        running_s = 0.0 if self._pass_started_s is None else now - self._pass_started_s
        return max(latency, running_s, self._starved_s(now))

    # ----------------------------------------------------------------------- questions

    def own_latency_us(self, now: float) -> int:
        """This node's figure for its peers (its starved process counts: module docstring)."""
        own = self.disks[self.node_id]
        figure = max(own.latency_s, self._starved_s(now))
        return UNKNOWN_US if own.heard_s == -math.inf and not figure else round(figure * 1e6)

    def should_hand_over(self, now: float) -> bool:
        """This node's disk has been slow for `slow_fsync_for_s` without a break."""
        since = self.disks[self.node_id].slow_since_s
        return since is not None and now - since >= self._settings.slow_fsync_for_s

    def avoided(self, node_id: int, now: float) -> bool:
        """Slow for `slow_fsync_for_s`, now or within the cooldown: no leadership for this
        node while another can lead."""
        disk = self.disks.get(node_id)
        return disk is not None and now - disk.last_slow_s < self._settings.slow_fsync_cooldown_s

    def fastest(self, candidates: list[int], now: float) -> int | None:
        """The candidate with the fastest disk among those not avoided (unknown counts
        as fast: a node that has not fsynced lately has nothing against it)."""
        usable = [c for c in candidates if not self.avoided(c, now)]
        return min(usable, key=lambda c: (self._latency_or_zero(c), c), default=None)

    def _latency_or_zero(self, node_id: int) -> float:
        disk = self.disks.get(node_id)
        return disk.latency_s if disk is not None else 0.0

    def to_json(self, now: float) -> dict:
        cooldown = self._settings.slow_fsync_cooldown_s
        return {str(n): d.to_json(now, cooldown) for n, d in sorted(self.disks.items())}
