"""A hypothesis state machine: random log operations against a plain in-memory model."""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from quorumlog.log.memdisk import MemoryFileSystem
from tests.log.helpers import batch_of, open_log, read_all

DIR = "/node/log"


def run_now(coro):
    """Drive a coroutine that never really suspends (the in-memory disk runs fsync inline)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("coroutine suspended")


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.fs = MemoryFileSystem()
        self.log = open_log(self.fs, DIR)
        self.model: list[tuple[int, bytes]] = []  # (term, value) per offset, from log start
        self.start = 0
        self.batch_starts: list[int] = []
        self.term = 1
        self.flushed = -1
        self.counter = 0

    @rule(records=st.integers(1, 5), size=st.integers(1, 300), new_term=st.booleans())
    def append(self, records, size, new_term):
        if new_term:
            self.term += 1
        values = []
        for _ in range(records):
            self.counter += 1
            values.append(b"%d:" % self.counter + b"x" * size)
        self.batch_starts.append(self.start + len(self.model))
        self.log.append([batch_of(*values)], term=self.term)
        self.model.extend((self.term, v) for v in values)

    @rule()
    def flush(self):
        self.flushed = run_now(self.log.flush())
        assert self.flushed == self.start + len(self.model) - 1

    @precondition(lambda self: self.batch_starts)
    @rule(data=st.data())
    def truncate_suffix(self, data):
        cut = data.draw(st.sampled_from(self.batch_starts))
        self.log.truncate_suffix(cut)
        del self.model[cut - self.start :]
        self.batch_starts = [b for b in self.batch_starts if b < cut]
        self.flushed = min(self.flushed, cut - 1)

    @rule(upto=st.integers(0, 400))
    def truncate_prefix(self, upto):
        new_start = self.log.truncate_prefix(upto)
        assert self.start <= new_start <= max(upto, self.start)
        del self.model[: new_start - self.start]
        self.batch_starts = [b for b in self.batch_starts if b >= new_start]
        self.start = new_start

    @rule()
    def reopen(self):
        run_now(self.log.flush())
        self.log.close()
        self.log = open_log(self.fs, DIR)
        self.flushed = self.log.flushed_offset

    @rule(seed=st.integers(0, 2**32))
    def crash(self, seed):
        """Power loss: unflushed data may vanish or be torn; flushed data must survive."""
        self.fs.crash(random.Random(seed))
        self.log = open_log(self.fs, DIR)
        assert self.log.log_start_offset <= self.start or self.start == 0
        survived = read_all(self.log, max(self.start, self.log.log_start_offset))
        flushed_part = [
            (o, v) for o, (_, v) in enumerate(self.model, self.start) if o <= self.flushed
        ]
        assert survived[: len(flushed_part)] == flushed_part
        # Adopt what survived as the new model.
        self.start = self.log.log_start_offset
        recovered = read_all(self.log)
        self.model = [(self.log.term_at(o), v) for o, v in recovered]
        # From the log itself: an unsynced truncation can be undone by the crash, bringing
        # back batches the model had cut (then the old boundaries are the true ones).
        self.batch_starts = sorted({self.log.batch_start(o) for o, _ in recovered})
        self.term = max(self.term, self.log.last_term)
        self.flushed = self.log.flushed_offset

    @invariant()
    def matches_model(self):
        log = self.log
        assert log.log_start_offset == self.start
        assert log.dirty_offset == self.start + len(self.model) - 1
        assert log.flushed_offset <= log.dirty_offset
        assert [v for _, v in read_all(log)] == [v for _, v in self.model]
        for offset in range(self.start, log.dirty_offset + 1, 7):
            assert log.term_at(offset) == self.model[offset - self.start][0]


LogMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestLogMachine = LogMachine.TestCase
