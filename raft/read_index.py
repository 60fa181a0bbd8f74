"""ReadIndex (Raft dissertation 6.4, etcd's readOnly): a leader answers a linearizable
read with its commit offset once a quorum of voters has confirmed, after the request, that
it still leads. It needs its term's barrier committed first (then its commit offset covers
everything acknowledged before it was elected).

`read_index()` notes the commit offset and sends a heartbeat carrying the request's
context; a follower's reply carries it back. An answer for a context answers every earlier
request too (the follower accepted this leader after all of them), so requests are
confirmed in order. Each request gets one `ReadState` in `read_states`: the offset, or
None when this node could not confirm it (not the settled leader, stepped down, or too
many waiting).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from quorumlog.membership.quorum import has_quorum
from quorumlog.raft.roles import Role

# Requests waiting for confirmation: one whose heartbeats went unanswered waits until a
# later request's answers confirm it or this node steps down (its caller may have given
# up long before), or it is the oldest when one more comes.
READS_PENDING_MAX = 1024


@dataclass(frozen=True, slots=True)
class ReadState:
    ctx: int
    offset: int | None


class ReadIndexRules:
    """RaftCore's ReadIndex (mixed into RaftCore, whose state it uses)."""

    def read_index(self) -> int:
        """A linearizable read: returns its context; its `ReadState` follows."""
        self._read_ctx += 1
        ctx = self._read_ctx
        if self.role is not Role.LEADER or self.term_at(self.commit_offset) != self.term:
            self.read_states.append(ReadState(ctx, None))
            return ctx
        self._reads[ctx] = (self.commit_offset, {self.id})
        if len(self._reads) > READS_PENDING_MAX:
            oldest = next(iter(self._reads))
            del self._reads[oldest]
            self.read_states.append(ReadState(oldest, None))
        heartbeat = replace(self.heartbeat_message(), read_ctx=ctx)
        for peer in self.config.voters - {self.id}:
            self._send(peer, heartbeat)
        self._confirm_reads()  # a single voter confirms alone
        return ctx

    def take_read_states(self) -> list[ReadState]:
        states, self.read_states = self.read_states, []
        return states

    def _on_read_ack(self, sender: int, ctx: int) -> None:
        for earlier, (_, acks) in self._reads.items():
            if earlier > ctx:
                break
            acks.add(sender)
        self._confirm_reads()

    def _confirm_reads(self) -> None:
        while self._reads:
            ctx, (offset, acks) = next(iter(self._reads.items()))
            if not has_quorum(self.config, acks):
                return
            del self._reads[ctx]
            self.read_states.append(ReadState(ctx, offset))

    def _drop_reads(self) -> None:
        """No longer the leader: what waits cannot be confirmed by this node."""
        self.read_states += [ReadState(ctx, None) for ctx in self._reads]
        self._reads.clear()
