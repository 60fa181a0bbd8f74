"""Consensus metadata: current term, vote, last committed configuration, incarnation.

Raft's durable state besides the log, as a value: the Raft core keeps it (raft/hard_state.py)
and the node writes it (log/metadata_store.py) before any reply that depends on it
(storage rule 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class ConsensusMetadata:
    # Identifies this data directory: a wiped directory is a new member (storage rule 9).
    incarnation: str
    current_term: int = 0
    voted_for: int | None = None
    # Last committed configuration, in membership's wire form (the log does not read it),
    # and the offset of its config batch (-1: the bootstrap configuration, not in the log).
    config: Any = None
    config_offset: int = -1
    # Set by a repair: the node must not vote before its log reaches this offset (rule 6).
    vote_after_offset: int = -1
    # The highest commit offset this node knew when the file was last written (a lower
    # bound, for unsafe recovery's report of what may be lost).
    known_commit_offset: int = -1

    def with_vote(self, term: int, voted_for: int | None) -> ConsensusMetadata:
        return replace(self, current_term=term, voted_for=voted_for)
