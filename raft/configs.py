"""Configurations in the log: config batches, and which configuration is in effect.

A configuration takes effect on a node as soon as its batch is appended there, not when it
commits (seed 000: "applies the configuration change in-memory"); if that batch is truncated
the node returns to the configuration before it. The last committed one is also written to
the consensus metadata, so that a restart does not depend on scanning the whole log.
"""

from __future__ import annotations

import msgpack

from quorumlog.log.batch import HEADER_BYTES, BatchHeader, BatchType, build_batch
from quorumlog.membership.config import Configuration, InvalidConfigurationError


def config_batch(config: Configuration) -> bytes:
    payload = msgpack.packb(config.to_wire(), use_bin_type=True)
    return build_batch(payload, record_count=1, batch_type=BatchType.CONFIG)


def config_of(batch: bytes | memoryview, header: BatchHeader) -> Configuration:
    """The configuration a config batch carries (its checksums already checked)."""
    payload = memoryview(batch)[HEADER_BYTES : HEADER_BYTES + header.payload_bytes]
    try:
        return Configuration.from_wire(msgpack.unpackb(payload, raw=False))
    except (ValueError, msgpack.UnpackException) as exc:
        raise InvalidConfigurationError(
            f"undecodable config batch at {header.base_offset}: {exc}"
        ) from None


class ConfigTracker:
    """The last committed configuration and the ones appended after it, in log order.

    Invariant: offsets ascend; every entry after the first is above the commit offset.
    """

    def __init__(self, committed: Configuration | None, committed_offset: int):
        self.committed = committed
        self.committed_offset = committed_offset
        self._appended: list[tuple[int, Configuration]] = []

    @property
    def current(self) -> Configuration | None:
        return self._appended[-1][1] if self._appended else self.committed

    @property
    def previous(self) -> Configuration | None:
        """The configuration `current` replaced in this log, while that change is not
        committed (afterwards this node no longer knows it)."""
        if len(self._appended) >= 2:
            return self._appended[-2][1]
        return self.committed if self._appended else None

    @property
    def change_in_flight(self) -> bool:
        return bool(self._appended)

    @property
    def joint_left_behind(self) -> bool:
        """A joint configuration committed under an earlier leader and not yet left: a
        leader leaves it once its own term's first entry commits, or no one ever would
        (seed 30217: a leader crashed between the two entries)."""
        return self.committed is not None and self.committed.is_joint and not self._appended

    # Where a node stands in the configuration in effect (none known: nowhere).

    def is_voter(self, node_id: int) -> bool:
        return self.current is not None and self.current.is_voter(node_id)

    def can_lead(self, node_id: int) -> bool:
        """A voter that is not a witness (membership/config.py)."""
        return self.current is not None and self.current.can_lead(node_id)

    def needed_until_committed(self, node_id: int) -> bool:
        """Left out of its latest configuration, not committed yet, while it may lead in
        the committed one: until that change commits the node may be needed to lead, so
        it still campaigns (Raft dissertation 4.2.2: "a server that is not part of its own
        latest configuration should still start new elections"; its own vote does not
        count, `vote_result` counts the configuration's voters). Seed 10089: C(new)
        reached only the nodes it left out, and its leader, cut off from the one node in
        C(new), stepped down; they refused that node their votes (its log was shorter)
        and, taking themselves for learners, never campaigned: no one could lead again.
        It learns that the change committed: a leader replicates to it until it says so
        (raft/reconfiguration.py `sync_progress`)."""
        return (
            self.change_in_flight
            and self.committed is not None
            and self.committed.can_lead(node_id)
            and not self.is_voter(node_id)
        )

    def takes_part(self, node_id: int) -> bool:
        """Whether the node follows (and may campaign) rather than only learns."""
        return self.is_voter(node_id) or self.needed_until_committed(node_id)

    def may_campaign(self, node_id: int) -> bool:
        """A voter that may lead, or one needed until its latest configuration commits."""
        return self.can_lead(node_id) or self.needed_until_committed(node_id)

    def members_except(self, node_id: int) -> set[int]:
        """Who a leader replicates to: the members of the configuration in effect and of
        the last committed one, that node aside."""
        members = set(self.current.members)
        if self.committed is not None:
            members |= self.committed.members
        members.discard(node_id)
        return members

    def appended(self, offset: int, config: Configuration) -> None:
        if offset <= self.committed_offset:
            return  # already known (a restart replays the tail after the stored config)
        assert not self._appended or offset > self._appended[-1][0]
        self._appended.append((offset, config))

    def truncated(self, from_offset: int) -> None:
        self._appended = [(o, c) for o, c in self._appended if o < from_offset]

    def commit(self, commit_offset: int) -> bool:
        """Advance to what `commit_offset` covers; True if the committed config changed."""
        changed = False
        while self._appended and self._appended[0][0] <= commit_offset:
            self.committed_offset, self.committed = self._appended.pop(0)
            changed = True
        return changed
