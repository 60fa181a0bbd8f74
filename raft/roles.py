"""A Raft node's roles and the error of a call that only a leader may answer."""

from __future__ import annotations

import enum


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"  # asking for pre-votes
    CANDIDATE = "candidate"
    LEADER = "leader"
    LEARNER = "learner"

    @property
    def label(self) -> str:
        """The role as `status` shows it (docs/cli.md): a pre-candidate is a candidate."""
        return "candidate" if self is Role.PRE_CANDIDATE else self.value


class NotLeaderError(Exception):
    def __init__(self, leader_id: int | None):
        super().__init__(f"not the leader (leader: {leader_id})")
        self.leader_id = leader_id
