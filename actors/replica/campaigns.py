"""Campaign slots: at most so many of a node's groups campaign at once, the others wait
their turn in the order their timers ran out.

A node that lost a peer, or that starts with a thousand groups, has hundreds of election
timers running out together. Campaigned all at once, their votes queue behind one another
on both cores, arrive after every candidate's timer ran out again, and no group elects
(docs/decisions/raft.md, "Elections with many partitions"). A few dozen at a time each finish
in a round trip. A slot is held for one attempt: a group whose election timed out gives it
up and queues again behind the groups that waited meanwhile. Transfers (TimeoutNow) take
no slot: they are paced by whoever asked for them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from quorumlog.raft.roles import Role

if TYPE_CHECKING:
    from quorumlog.raft.core import RaftCore

# Measured with 1,000 partitions x 3 on 3 nodes, seconds until all lead after one node is
# lost / all restart (polled about every second): 8 slots 3.3 / 8.5, 32: 2.6 / 8.9, 128:
# 3.0 / 9.4, with more split votes (terms up to 5) and dropped sends at 128. Not sensitive
# on this machine; 32 keeps a burst well under a link's 128 queued frames.
CAMPAIGNS_MAX = 32


class CampaignSlots:
    def __init__(self, limit: int = CAMPAIGNS_MAX):
        self._limit = limit
        self._holders: set[int] = set()
        # Groups waiting for a slot, first come first served: group id -> its wake-up.
        self._waiting: OrderedDict[int, Callable[[], None]] = OrderedDict()

    def take(self, group_id: int, wake: Callable[[], None]) -> bool:
        """True if the group may campaign now; otherwise it waits and `wake` is called when
        a slot is kept for it (the group then asks again)."""
        if group_id in self._holders:
            return True
        if len(self._holders) < self._limit and not self._waiting:
            self._holders.add(group_id)
            return True
        self._waiting.setdefault(group_id, wake)
        return False

    def waiting(self, group_id: int) -> bool:
        return group_id in self._waiting

    def give_back(self, group_id: int) -> None:
        """The group's attempt ended (it leads, follows, or its election timed out)."""
        if group_id not in self._holders:
            return
        self._holders.discard(group_id)
        while self._waiting and len(self._holders) < self._limit:
            next_id, wake = self._waiting.popitem(last=False)
            self._holders.add(next_id)
            wake()

    def forget(self, group_id: int) -> None:
        """The group stopped here (deleted, or its task restarts)."""
        self._waiting.pop(group_id, None)
        self.give_back(group_id)

    @property
    def holders(self) -> int:
        return len(self._holders)


class CampaignTurn:
    """One group's use of its node's slots, for its actor: whether it may campaign now,
    and what it gives back after each round."""

    def __init__(self, slots: CampaignSlots, group_id: int, wake: Callable[[], None], exempt: bool):
        self._slots = slots
        self._group_id = group_id
        self._wake = wake
        self._exempt = exempt  # the controller's group: the cluster's metadata waits for no one
        self._campaigning = False  # an attempt of its own holds one of the slots

    def waiting(self) -> bool:
        """Queued for a slot: its election timer is off until the slots wake it."""
        return self._slots.waiting(self._group_id)

    def may_campaign(self) -> bool:
        """Whether the group may start an election now; if not, it is queued."""
        if self._exempt:
            return True
        if self._campaigning:  # the attempt its slot served timed out: behind those waiting
            self._campaigning = False
            self._slots.give_back(self._group_id)
        self._campaigning = self._slots.take(self._group_id, self._wake)
        return self._campaigning

    def round_ended(self, core: RaftCore, now: float) -> None:
        if core.role in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            return  # its attempt goes on
        self._campaigning = False
        if core.campaign_due(now):
            self._slots.give_back(self._group_id)  # it still waits its turn
        else:  # it leads (a transfer), or heard a leader: out of the queue too, timers on
            self._slots.forget(self._group_id)
