"""What a core must find again after a crash (etcd's HardState): its term, its vote (and
from which log offset it may vote again: raft/election.py), and the committed
configuration its log may no longer hold (seed 000: "made durable on commit"). Whether it
changed since the node last saved it: the node saves it before any message of the round
goes (storage rule 1)."""

from __future__ import annotations

from dataclasses import replace

from quorumlog.log.metadata import ConsensusMetadata


class HardState:
    def __init__(self, meta: ConsensusMetadata):
        self.meta = meta
        self.dirty = False  # changed since taken

    @property
    def term(self) -> int:
        return self.meta.current_term

    def vote(self, term: int, voted_for: int | None) -> None:
        self.meta = self.meta.with_vote(term, voted_for)
        self.dirty = True

    def keep_config(self, config: dict | None, offset: int) -> None:
        """The committed configuration (its wire form; None: none known) as of `offset`."""
        self.meta = replace(self.meta, config=config, config_offset=offset)
        self.dirty = True

    def take(self) -> ConsensusMetadata | None:
        """What to save now, if anything changed."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.meta
