"""What a Raft core asks of its node at the end of a round of inputs (etcd's `Ready`), in
the order the node must do it: apply the log writes (to its page cache), save the hard
state (term, vote, configuration) before anything is sent (storage rule 1), then send the
messages. Replies
that must wait for a flush are not in it: the core sends them once `on_persisted` says
their entries are durable. A Ready of nothing asks nothing (`bool(ready)` is False)."""

from __future__ import annotations

from dataclasses import dataclass

from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.raft.messages import RaftMessage
from quorumlog.raft.raft_log import LogWrites
from quorumlog.raft.read_index import ReadState


@dataclass(frozen=True, slots=True)
class Ready:
    hard_state: ConsensusMetadata | None  # to persist before any message goes
    writes: LogWrites | None  # to the log (its page cache), before any message goes
    messages: list[tuple[int, RaftMessage]]  # (to, message)
    read_states: list[ReadState]  # linearizable reads answered (raft/read_index.py)
    flush_urgent: bool  # a flush is awaited (a follower's reply, a copy moving in)

    def __bool__(self) -> bool:
        return bool(
            self.hard_state or self.writes or self.messages or self.read_states or self.flush_urgent
        )


class Outbox:
    """What a round of the core sends, in order, and whether it waits for a flush."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, RaftMessage]] = []
        self.flush_wanted = False

    def send(self, to: int, message: RaftMessage) -> None:
        self.messages.append((to, message))

    def flush_soon(self) -> None:
        """A flush is awaited: a follower's reply, a copy of older records moving in."""
        self.flush_wanted = True

    def take_messages(self) -> list[tuple[int, RaftMessage]]:
        out, self.messages = self.messages, []
        return out

    def take_flush(self) -> bool:
        wanted, self.flush_wanted = self.flush_wanted, False
        return wanted
