"""Batched heartbeats: one message per node pair per interval carries every group the
sender leads towards that peer (Redpanda's heartbeat manager), and idle groups sleep.

Leader side: each group this node leads is registered here with its term, commit offset
and peers (`leading`); every interval each peer gets one `HeartbeatBatch` naming every such
group it replicates: [group, term, commit] where that changed since the last batch to the
peer, the bare id otherwise (`BeatBatcher`). The groups' own Heartbeat messages are not sent
(but a ReadIndex's, which carry the read's context: raft/read_index.py).

Follower side (`BeatReceiver`): a full entry becomes a Heartbeat for its group; an id
costs a timestamp for a quiet group that follows the sender (when its leader's node last
named it), and becomes the Heartbeat of its last full entry for any other. A quiet group
whose leader's node has not named it for the minimum election timeout (the node died, or
no longer leads it) is woken: its election timer runs again. A quiet leader is woken when
a majority of its peers has not answered this node for the maximum election timeout
(raft/core.py, "quiet groups", says what quiet means and why it is safe).

The classes below are plain state, tested without trio; `HeartbeatManager` is the task.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgpack
import structlog
import trio

from quorumlog.raft.messages import Heartbeat
from quorumlog.transport.messages import HeartbeatBatch, HeartbeatBatchReply

if TYPE_CHECKING:
    from quorumlog.actors.services.disk_health import DiskHealth
    from quorumlog.actors.services.stats import NodeStats
    from quorumlog.raft.settings import RaftSettings

logger = structlog.get_logger("quorumlog.heartbeats")


class Beating(Protocol):
    """A replica as the heartbeats see it (a `ReplicaActor` is one)."""

    def deliver_nowait(self, sender: int, message: Heartbeat) -> None:
        """A beat (or what a quiet group's beat stands for) into its mailbox."""

    def wake_up(self) -> None:
        """A quiet group runs its timers again."""


# A group named by a leader's beats but not hosted here for this long is forgotten (its
# topic was deleted: issue 51). One still being made here is named by every beat until it
# is: what its leader last said must stay for it (dropping it at once, in on_batch, left
# 150 of 1,000 new groups leaderless after a node was lost).
UNHOSTED_FORGOTTEN_S = 10.0


def pack_ids(ids: Iterable[int]) -> bytes:
    return array("q", ids).tobytes()


def unpack_ids(data: bytes) -> list[int]:
    if len(data) % 8:
        raise ValueError(f"a group id array of {len(data)} bytes")
    ids = array("q")
    ids.frombytes(data)
    return ids.tolist()


@dataclass(frozen=True, slots=True)
class Led:
    """A group this node leads, as the batches need it."""

    term: int
    commit_offset: int
    peers: tuple[int, ...]


class BeatBatcher:
    """What to send each peer: the bare id of a group whose (term, commit) the peer has
    confirmed receiving (its reply to a batch that carried it), a full entry otherwise. A
    lost batch therefore costs a resend, never a follower stuck on an old commit."""

    # Batches whose replies are awaited, per peer: older ones are forgotten (lost).
    UNCONFIRMED_MAX = 8

    def __init__(self) -> None:
        self._confirmed: dict[int, dict[int, tuple[int, int]]] = {}  # peer -> group -> state
        self._unconfirmed: dict[int, dict[int, dict[int, tuple[int, int]]]] = {}  # peer, seq
        self._seq = 0

    def batch(self, peer: int, led: dict[int, Led]) -> tuple[int, list[int], list[list[int]]]:
        """(sequence number, ids, full entries) of the next batch to `peer`."""
        confirmed = self._confirmed.setdefault(peer, {})
        ids: list[int] = []
        full: list[list[int]] = []
        carried: dict[int, tuple[int, int]] = {}
        for group_id, state in led.items():
            if peer not in state.peers:
                continue
            beat = (state.term, state.commit_offset)
            if confirmed.get(group_id) == beat:
                ids.append(group_id)
            else:
                carried[group_id] = beat
                full.append([group_id, *beat])
        if len(confirmed) > len(ids):  # groups no longer led towards this peer, or changed
            for group_id in [g for g in confirmed if g not in led]:
                del confirmed[group_id]
        self._seq += 1
        unconfirmed = self._unconfirmed.setdefault(peer, {})
        if carried:
            unconfirmed[self._seq] = carried
            while len(unconfirmed) > self.UNCONFIRMED_MAX:
                del unconfirmed[next(iter(unconfirmed))]
        return self._seq, ids, full

    def confirmed(self, peer: int, seq: int, need_full: Iterable[int]) -> None:
        """The peer answered batch `seq`; it lacks the full entries of `need_full`."""
        carried = self._unconfirmed.get(peer, {}).pop(seq, None)
        confirmed = self._confirmed.setdefault(peer, {})
        if carried:
            confirmed.update(carried)
        for group_id in need_full:
            confirmed.pop(group_id, None)


class BeatReceiver:
    """The last full entry of each (leader node, group), to read ids by."""

    def __init__(self) -> None:
        self._full: dict[int, dict[int, tuple[int, int]]] = {}  # group -> leader node -> entry

    def receive(
        self, sender: int, ids: list[int], full: list[list[int]]
    ) -> tuple[list[Heartbeat], list[int], list[int]]:
        """(Heartbeats of the full entries, ids known, ids whose full entry is unknown)."""
        beats = []
        for group_id, term, commit in full:
            self._full.setdefault(group_id, {})[sender] = (term, commit)
            beats.append(
                Heartbeat(group=group_id, term=term, leader_id=sender, leader_commit=commit)
            )
        known, unknown = [], []
        for group_id in ids:
            (known if sender in self._full.get(group_id, ()) else unknown).append(group_id)
        return beats, known, unknown

    def heartbeat(self, sender: int, group_id: int) -> Heartbeat:
        term, commit = self._full[group_id][sender]
        return Heartbeat(group=group_id, term=term, leader_id=sender, leader_commit=commit)

    def __len__(self) -> int:
        return sum(len(leaders) for leaders in self._full.values())

    def forget(self, group_id: int) -> None:
        """A group this node does not host (any more): its entries go (issue 51)."""
        self._full.pop(group_id, None)


class HeartbeatManager:
    def __init__(
        self,
        node_id: int,
        settings: RaftSettings,
        groups: Callable[[], dict[int, Beating]],
        send: Callable[[int, object], None],
        stats: NodeStats,
        disk_health: DiskHealth,
    ):
        self.node_id = node_id
        self._settings = settings
        self._disk_health = disk_health  # the batches carry fsync latencies both ways
        self._groups = groups  # the node's groups, by id, as they are now
        self._send = send
        self._stats = stats
        self._led: dict[int, Led] = {}
        self._batcher = BeatBatcher()
        self._receiver = BeatReceiver()
        # Liveness: when each group was last named by a batch (and by which node), and
        # when each peer last answered ours. Quiet groups rely on these.
        self.named: dict[int, tuple[int, float]] = {}
        self.answered_by: dict[int, float] = {}
        self._quiet_following: dict[int, int] = {}  # quiet follower group -> leader node
        self._quiet_leading: set[int] = set()
        self._pruned_at = 0.0

    # ------------------------------------------------------------------- groups' side

    def leading(self, group_id: int, term: int, commit_offset: int, peers: tuple[int, ...]) -> None:
        self._led[group_id] = Led(term, commit_offset, peers)

    def not_leading(self, group_id: int) -> None:
        self._led.pop(group_id, None)
        # A quiet leader may step down in a round that did not wake it (a timer's): left
        # here, the node's task died on its missing entry in `_watch_peers`.
        self._quiet_leading.discard(group_id)

    def quiet_follower(self, group_id: int, leader_id: int) -> None:
        self._quiet_following[group_id] = leader_id

    def quiet_leader(self, group_id: int) -> None:
        self._quiet_leading.add(group_id)

    def active(self, group_id: int) -> None:
        self._quiet_following.pop(group_id, None)
        self._quiet_leading.discard(group_id)

    def forget(self, group_id: int) -> None:
        """The group stopped here (its topic was deleted, or its task restarts)."""
        self.active(group_id)
        self._led.pop(group_id, None)
        self.named.pop(group_id, None)
        self._receiver.forget(group_id)

    def table_sizes(self) -> dict[str, int]:
        """What this node keeps per group it hears of (status's `tables`)."""
        return {"heartbeat_entries": len(self._receiver), "heartbeat_groups_named": len(self.named)}

    def contacts_for(self, group_id: int, leading: bool) -> dict[int, float]:
        """What the node heard that a waking group's core has not seen: for a leader,
        when each peer last answered this node; for a follower, when the node that leads
        it last named it (only that: other traffic from that node says nothing of it)."""
        if leading:
            return self.answered_by
        named = self.named.get(group_id)
        return {} if named is None else {named[0]: named[1]}

    # ------------------------------------------------------------------- messages

    def on_batch(self, sender: int, message: HeartbeatBatch) -> None:
        now = trio.current_time()
        self._disk_health.peer_reported(sender, message.fsync_us, now)
        try:
            ids = unpack_ids(message.ids)
            full = msgpack.unpackb(message.full, raw=False)
            beats, known, unknown = self._receiver.receive(sender, ids, full)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            logger.warning("bad_heartbeat_batch", peer=sender, error=str(exc))
            return
        groups = self._groups()
        named = self.named
        for beat in beats:
            named[beat.group] = (sender, now)
            if (group := groups.get(beat.group)) is not None:
                group.deliver_nowait(sender, beat)
        following = self._quiet_following
        for group_id in known:
            named[group_id] = (sender, now)
            if following.get(group_id) == sender:
                continue  # a quiet follower of the sender: the timestamp is all it needs
            if (group := groups.get(group_id)) is not None:
                group.deliver_nowait(sender, self._receiver.heartbeat(sender, group_id))
        fsync_us = self._disk_health.own_latency_us(now)
        self._send(sender, HeartbeatBatchReply(message.seq, pack_ids(unknown), fsync_us))

    def on_batch_reply(self, sender: int, message: HeartbeatBatchReply) -> None:
        try:
            need_full = unpack_ids(message.need_full)
        except ValueError as exc:
            logger.warning("bad_heartbeat_batch_reply", peer=sender, error=str(exc))
            return
        now = trio.current_time()
        self.answered_by[sender] = now
        self._disk_health.peer_reported(sender, message.fsync_us, now)
        self._batcher.confirmed(sender, message.seq, need_full)

    # ------------------------------------------------------------------- the task

    async def run(self) -> None:
        interval = self._settings.heartbeat_interval_s
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            fsync_us = self._disk_health.own_latency_us(now)
            peers = {p for led in self._led.values() for p in led.peers}
            for peer in sorted(peers):
                seq, ids, full = self._batcher.batch(peer, self._led)
                if ids or full:
                    full_bytes = msgpack.packb(full, use_bin_type=True)
                    message = HeartbeatBatch(seq, pack_ids(ids), full_bytes, fsync_us)
                    self._send(peer, message)
                    self._stats.heartbeats_sent += 1
            self._watch_peers(now)
            if now - self._pruned_at >= UNHOSTED_FORGOTTEN_S:
                self._pruned_at = now
                self._forget_unhosted(now)

    def _forget_unhosted(self, now: float) -> None:
        groups = self._groups()
        for group_id, (_, at) in list(self.named.items()):
            if group_id not in groups and now - at >= UNHOSTED_FORGOTTEN_S:
                del self.named[group_id]
                self._receiver.forget(group_id)

    def _watch_peers(self, now: float) -> None:
        """Wake quiet followers their leader's node stopped naming, and quiet leaders that
        no longer hear from a majority of their peers (nothing to check while every peer
        answers)."""
        settings = self._settings
        timeout = settings.election_timeout_min_s
        for group_id, leader in list(self._quiet_following.items()):
            named = self.named.get(group_id)
            if named is None or named[0] != leader or now - named[1] > timeout:
                self._wake(group_id)
        window = settings.election_timeout_max_s
        answered = self.answered_by
        led = self._led
        silent = {
            peer
            for group_id in self._quiet_leading
            for peer in led[group_id].peers
            if now - answered.get(peer, -math.inf) > window
        }
        if not silent:
            return
        for group_id in list(self._quiet_leading):
            peers = led[group_id].peers
            heard = sum(peer not in silent for peer in peers) + 1  # and itself
            if 2 * heard <= len(peers) + 1:
                self._wake(group_id)  # its check-quorum rule decides

    def _wake(self, group_id: int) -> None:
        self._quiet_following.pop(group_id, None)
        self._quiet_leading.discard(group_id)
        group = self._groups().get(group_id)
        if group is not None:
            group.wake_up()
