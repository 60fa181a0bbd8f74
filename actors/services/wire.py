"""What travels between nodes beyond the transport's own messages: Raft's (raft/messages.py).
The raft layer knows nothing of the wire; the node registers its messages with the codec."""

from __future__ import annotations

from quorumlog.raft.messages import RAFT_MESSAGES, RAFT_REPLIES
from quorumlog.transport import codec


def register_raft_messages() -> None:
    """Idempotent: every node calls it, and so do tools that speak to nodes directly."""
    codec.register(*RAFT_MESSAGES, replies=RAFT_REPLIES)
