"""How the leader table (controller/leaders.py) reaches every node, and is repaired when
a message that fed it was lost (KUDU-1353, in the form that outlived the full report).

Three ways, each covering what the one before can miss:

1. **Updates.** Each node sends the leader changes of its own replicas to every other
   node, batched every LEADER_UPDATES_INTERVAL_S. A send may be dropped (no connection, a
   full queue): nothing resends it.
2. **Reports.** A node that sees a new controller leader sends it a full report of its
   replicas, and the leader answers with its whole table; a link that connects gets the
   same at once (the node's own entries, and the whole table from the controller's
   leader), since whatever was sent while it was down was lost.
3. **Digests.** Every DIGEST_INTERVAL_S the controller's leader sends every node a hash
   of its table. A node whose own table hashes otherwise (at the same point of the
   controller's log) sends the leader a full report, and gets the whole table back. Every
   entry's newest version starts at the node that hosts the replica, so after one round
   of reports the leader holds the newest of everything, and after the next every node
   does. This one alone repairs any loss, within a few intervals.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import msgpack
import structlog
import trio

from quorumlog.controller.leaders import LeaderEntry, LeaderTable
from quorumlog.transport.messages import LeaderDigest, LeaderUpdates

if TYPE_CHECKING:
    from quorumlog.actors.cluster.controller import ControllerActor
    from quorumlog.actors.replica.actor import ReplicaActor

logger = structlog.get_logger("quorumlog.controller")

# Leader changes of this node's replicas go out at most this often, batched.
LEADER_UPDATES_INTERVAL_S = 0.05
# How often the controller's leader sends every node the hash of its table.
DIGEST_INTERVAL_S = 2.0


class LeaderTableSync:
    def __init__(self, ctl: ControllerActor) -> None:
        self._ctl = ctl
        self.table = LeaderTable()
        self._outgoing: dict[tuple[str, int], LeaderEntry] = {}
        self._reported_to: tuple[int, int] | None = None  # (controller leader, term)
        self._digest: tuple[tuple[int, int], bytes] | None = None  # cached, by its key
        # Replicas that changed leader before this node's state held their topic (opened
        # from disk at a restart, before the controller's log is applied again).
        self._unknown: dict[tuple[str, int], ReplicaActor] = {}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_updates)
            nursery.start_soon(self._send_digests)

    # ------------------------------------------------------------------- feeding

    def local_changed(self, topic: str, partition: int, group: ReplicaActor) -> None:
        """One of this node's replicas saw a new leader or term."""
        revision = self._revision(topic, partition)
        if revision is None:
            # Its entry would carry no revision, and lose to a later one of the topic's
            # that names no leader (seed 5007: the leader's own table said none, for good).
            self._unknown[(topic, partition)] = group
            return
        if self._take_own(self._own_entry(topic, partition, group, revision)):
            self._ctl.signal()

    def topics_applied(self) -> None:
        """The state took more of the controller's log: announce the replicas whose topic
        it now holds."""
        for key, group in list(self._unknown.items()):
            if self._ctl.node.partitions.get(key) is not group:
                del self._unknown[key]  # the replica is gone (its topic deleted, say)
            elif self._revision(*key) is not None:
                del self._unknown[key]
                self.local_changed(*key, group)
        for topic in {entry.topic for entry in self.table if self._deleted(entry)}:
            self.table.forget_topic(topic)

    def _deleted(self, entry: LeaderEntry) -> bool:
        """An entry of a topic this node's state saw made and then go: a peer's update
        that crossed the deletion would keep it for good (issue 51). A topic made after
        what the state applied is kept: this node lags."""
        state = self._ctl.state
        return entry.topic not in state.topics and entry.revision <= state.applied_offset

    def on_updates(self, sender: int, message: LeaderUpdates) -> None:
        try:
            entries = [LeaderEntry(*e) for e in msgpack.unpackb(message.entries, raw=False)]
        except (TypeError, ValueError, msgpack.UnpackException) as exc:
            logger.warning("bad_leader_updates", error=str(exc))
            return
        taken = self.table.merge(e for e in entries if not self._deleted(e))
        for entry in taken:
            if entry.leader_id == self._ctl.node.id:
                self._correct_own(entry)
        if taken:
            self._ctl.signal()
        if message.full and self._ctl.group.view.is_leader:
            # The sender knows only what changed since it last heard: without the whole
            # table it would never learn of a partition whose leader stays put.
            self._send(sender, list(self.table), full=False)

    def on_digest(self, sender: int, message: LeaderDigest) -> None:
        view = self._ctl.group.view
        if sender != view.leader_id or message.applied_through != self._ctl.applied_through:
            return  # not the leader this node follows, or states apart: the next one
        if message.digest != self.digest():
            logger.info("leader_table_repair", node_id=self._ctl.node.id, leader=sender)
            self._send(sender, self._own_entries(), full=True)

    def peer_connected(self, peer: int) -> None:
        """What was sent to `peer` while its link was down is lost: send it again."""
        view = self._ctl.group.view
        if view.is_leader:
            self._send(peer, list(self.table), full=False)
        else:
            self._send(peer, self._own_entries(), full=peer == view.leader_id)

    def report_to_new_controller(self) -> None:
        """A new controller leader gets a full report of every replica hosted here."""
        view = self._ctl.group.view
        if view.leader_id is None or (view.leader_id, view.term) == self._reported_to:
            return
        self._reported_to = (view.leader_id, view.term)
        entries = self._own_entries()
        if view.leader_id == self._ctl.node.id:
            self.table.merge(entries)
        else:
            self._send(view.leader_id, entries, full=True)

    # ------------------------------------------------------------------- sending

    async def _send_updates(self) -> None:
        while True:
            await trio.sleep(LEADER_UPDATES_INTERVAL_S)
            if self._outgoing:
                entries, self._outgoing = list(self._outgoing.values()), {}
                message = LeaderUpdates(_pack(entries), False)
                for peer in self._members():
                    self._ctl.node.send_nowait(peer, message)

    async def _send_digests(self) -> None:
        while True:
            await trio.sleep(DIGEST_INTERVAL_S)
            if self._ctl.group.view.is_leader:
                message = LeaderDigest(self.digest(), self._ctl.applied_through)
                for peer in self._members():
                    self._ctl.node.send_nowait(peer, message)

    def _members(self) -> list[int]:
        """The other nodes of the cluster: the controller group's members, learners too
        (a node being added hosts replicas and answers clients before it votes)."""
        config = self._ctl.group.view.config
        members = set(self._ctl.state.brokers) | (set() if config is None else config.members)
        return sorted(members - {self._ctl.node.id})

    def _send(self, peer: int, entries: list[LeaderEntry], *, full: bool) -> None:
        self._ctl.node.send_nowait(peer, LeaderUpdates(_pack(entries), full))

    # ------------------------------------------------------------------- entries

    def digest(self) -> bytes:
        """A hash of the entries of the partitions the controller's state holds (an
        update that arrived after its topic was deleted must not keep two tables apart
        for ever), cached until the table or the state changes."""
        key = (self.table.version, self._ctl.applied_through)
        if self._digest is None or self._digest[0] != key:
            rows = sorted(
                (e.topic, e.partition, -1 if e.leader_id is None else e.leader_id, e.term, e.ended)
                for e in self.table
                if self._is_placed(e)
            )
            value = hashlib.blake2b(msgpack.packb(rows), digest_size=16).digest()
            self._digest = (key, value)
        return self._digest[1]

    def _is_placed(self, entry: LeaderEntry) -> bool:
        return entry.revision == self._revision(entry.topic, entry.partition)

    def _revision(self, topic: str, partition: int) -> int | None:
        """What orders a partition's leader entries before its terms: the creation of its
        group (a topic deleted and created again is a new group whose terms start again).
        Not the last move: within one group terms only grow."""
        found = self._ctl.state.topics.get(topic)
        if found is None or not 0 <= partition < len(found.partitions):
            return None
        return found.partitions[partition].created_offset

    def _own_entries(self) -> list[LeaderEntry]:
        """This node's replicas whose partition the state holds (the others are announced
        once it does: `topics_applied`)."""
        return [
            self._own_entry(t, p, g, revision)
            for (t, p), g in self._ctl.node.partitions.items()
            if (revision := self._revision(t, p)) is not None
        ]

    def _own_entry(
        self, topic: str, partition: int, group: ReplicaActor, revision: int
    ) -> LeaderEntry:
        """What this node's replica says of its partition. A replica that led its term
        and no longer does (check-quorum stepped it down) says the term's leadership
        ended: its entry must replace the one naming it, which no follower's can (issue
        45). The table tells whether it led: only this node can have put an entry naming
        itself there, for that term (or one naming it again after a restart, which
        `_correct_own` answers)."""
        view = group.view
        if view.leader_id is None and not view.is_leader:
            known = self.table.get(topic, partition)
            if (
                known is not None
                and (known.revision, known.term) == (revision, view.term)
                and (known.ended or known.leader_id == self._ctl.node.id)
            ):
                return LeaderEntry(topic, partition, None, view.term, revision, ended=True)
        return LeaderEntry(topic, partition, view.leader_id, view.term, revision)

    def _take_own(self, entry: LeaderEntry) -> bool:
        if not self.table.update(entry):
            return False
        self._outgoing[entry.key] = entry
        return True

    def _correct_own(self, taken: LeaderEntry) -> None:
        """Another node's table named this one as leader (`taken`): if this node's replica
        knows better (it stepped down before a restart, say), send what it knows."""
        group = self._ctl.node.partitions.get(taken.key)
        if group is not None and self._revision(*taken.key) == taken.revision:
            self._take_own(self._own_entry(taken.topic, taken.partition, group, taken.revision))


def _pack(entries: list[LeaderEntry]) -> bytes:
    # `ended` only where set: what a node of the release before reads stays the same.
    return msgpack.packb(
        [
            [e.topic, e.partition, e.leader_id, e.term, e.revision, *([True] if e.ended else [])]
            for e in entries
        ],
        use_bin_type=True,
    )
