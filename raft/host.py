"""What a role's part may use of the core it belongs to (raft/core.py `RaftCore` is one).

`Follower`, `Leader`, `MembershipChanges` and the back-fill parts own their state and read
the rest here: the parts every role shares, the replica's position, and the few changes of
the whole replica they may ask for (a role change, a commit, a configuration). Anything a
part needs beyond this list is a sign that it belongs in the core, or the core's state in
the part.
"""

from __future__ import annotations

import random
from typing import Protocol

from quorumlog.log.batch import BatchHeader
from quorumlog.membership.config import Configuration
from quorumlog.raft.conditions import NodeConditions
from quorumlog.raft.configs import ConfigTracker
from quorumlog.raft.log_index import LogIndex
from quorumlog.raft.messages import RaftMessage
from quorumlog.raft.progress import Progress, ProgressTracker
from quorumlog.raft.raft_log import RaftLog
from quorumlog.raft.read_index import ReadOnly
from quorumlog.raft.ready import Outbox
from quorumlog.raft.settings import RaftSettings


class CoreHost(Protocol):
    # Who it is, and how it was set up.
    id: int
    group_id: int
    settings: RaftSettings
    rng: random.Random
    witnesses_from_commit: bool
    # The parts every role reads.
    log: RaftLog
    configs: ConfigTracker
    tracker: ProgressTracker
    reads: ReadOnly
    index: LogIndex
    outbox: Outbox
    conditions: NodeConditions
    # Where the replica stands.
    now: float
    leader_id: int | None

    @property
    def term(self) -> int: ...

    @property
    def commit_offset(self) -> int: ...

    @property
    def persisted_offset(self) -> int: ...

    @property
    def config(self) -> Configuration | None: ...

    def term_at(self, offset: int) -> int: ...

    def holds_the_log(self, p: Progress) -> bool: ...

    def caught_up(self, p: Progress) -> bool: ...

    # What a part may do to the whole replica.
    def send(self, to: int, message: RaftMessage) -> None: ...

    def become_follower(self, term: int, leader_id: int | None, now: float) -> None: ...

    def heard_from_leader(self, leader_id: int, now: float) -> None: ...

    def commit_to(self, offset: int) -> None: ...

    def config_changed(self) -> None: ...

    def restart_config(self, config: Configuration | None, offset: int) -> None: ...

    def note_batch(self, header: BatchHeader, batch: memoryview | bytes) -> None: ...
