"""ReadIndex (Raft dissertation 6.4, etcd's readOnly): a leader answers a linearizable
read with its commit offset once a quorum of voters has confirmed, after the request, that
it still leads. It needs its term's barrier committed first (then its commit offset covers
everything acknowledged before it was elected).

`RaftCore.read_index()` notes the commit offset here and sends a heartbeat carrying the
request's context; a follower's reply carries it back. An answer for a context answers every earlier
request too (the follower accepted this leader after all of them), so requests are
confirmed in order. Each request gets one `ReadState` in the core's `Ready`: the offset, or
None when this node could not confirm it (not the settled leader, stepped down, or too
many waiting).
"""

from __future__ import annotations

from dataclasses import dataclass

from quorumlog.membership.config import Configuration
from quorumlog.membership.quorum import has_quorum

# Requests waiting for confirmation: one whose heartbeats went unanswered waits until a
# later request's answers confirm it or this node steps down (its caller may have given
# up long before), or it is the oldest when one more comes.
READS_PENDING_MAX = 1024


@dataclass(frozen=True, slots=True)
class ReadState:
    ctx: int
    offset: int | None


class ReadOnly:
    """The reads waiting for a quorum's confirmation, in the order they came (by context,
    with the commit offset noted and who confirmed), and the answers not yet taken
    (etcd's readOnly). The core decides whether a read may wait and sends its heartbeat."""

    def __init__(self) -> None:
        self._ctx = 0
        self._waiting: dict[int, tuple[int, set[int]]] = {}
        self._answered: list[ReadState] = []

    def refuse(self) -> int:
        """A read this node cannot confirm (not the settled leader): answered None."""
        self._ctx += 1
        self._answered.append(ReadState(self._ctx, None))
        return self._ctx

    def wait(self, commit_offset: int, self_id: int) -> int:
        """A read of `commit_offset` that waits for a quorum; returns its context."""
        self._ctx += 1
        self._waiting[self._ctx] = (commit_offset, {self_id})
        if len(self._waiting) > READS_PENDING_MAX:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            self._answered.append(ReadState(oldest, None))
        return self._ctx

    def ack(self, sender: int, ctx: int, config: Configuration) -> None:
        """`sender` confirmed this leader after the read `ctx`, hence after every earlier."""
        for earlier, (_, acks) in self._waiting.items():
            if earlier > ctx:
                break
            acks.add(sender)
        self.confirm(config)

    def confirm(self, config: Configuration) -> None:
        """Answer the reads, oldest first, that a quorum of `config` confirmed."""
        while self._waiting:
            ctx, (offset, acks) = next(iter(self._waiting.items()))
            if not has_quorum(config, acks):
                return
            del self._waiting[ctx]
            self._answered.append(ReadState(ctx, offset))

    def drop(self) -> None:
        """No longer the leader: what waits cannot be confirmed by this node."""
        self._answered += [ReadState(ctx, None) for ctx in self._waiting]
        self._waiting.clear()

    def take(self) -> list[ReadState]:
        answered, self._answered = self._answered, []
        return answered
