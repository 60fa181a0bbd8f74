"""The shared helpers of the Raft core's tests (`raft/core.py`): plain calls, no trio, no sockets.

Messages go in through `step`/`tick`/`on_persisted` with explicit times; what the core wants
sent comes out of `take_outbox`. The in-memory disk stands in for the log's files.
"""

from __future__ import annotations

import random
from dataclasses import replace

from quorumlog.log.batch import split_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.log.wal import Log, run_inline
from quorumlog.membership.config import Configuration
from quorumlog.raft.core import Proposal, RaftCore
from quorumlog.raft.messages import AppendEntries, AppendEntriesReply, AppendResult, VoteReply
from quorumlog.raft.raft_log import RaftLog
from quorumlog.raft.roles import Role
from quorumlog.raft.settings import RaftSettings

SETTINGS = RaftSettings()
PEERS = {1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: "127.0.0.1:7003"}
BOOTSTRAP = Configuration.bootstrap(PEERS)

WITH_WITNESS = Configuration(
    version=1,
    voters=frozenset({1, 2, 3}),
    learners=frozenset(),
    addresses=PEERS,
    witnesses=frozenset({3}),
)


def apply_writes(log: RaftLog) -> None:
    """What a replica's task does at the end of a round: the core's writes go to its log."""
    writes = log.take_writes()
    if writes is not None:
        writes.apply(log.stored)


def flush(log: RaftLog) -> int:
    """What a node does with a core's log: its replica's task applies the round's writes,
    then its flusher makes them durable. Returns the durable offset."""
    apply_writes(log)
    coro = log.stored.flush()
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the in-memory flush never suspends")


def persist(core: RaftCore, now: float) -> None:
    """What a node's flusher does: make the core's log durable and report how far."""
    core.on_persisted(flush(core.log), now)


def append_reply(
    node_id: int,
    term: int,
    flushed: int,
    dirty: int,
    result: AppendResult = AppendResult.SUCCESS,
    **rest,
) -> AppendEntriesReply:
    """A follower's answer to group 0's leader."""
    return AppendEntriesReply(
        group=0,
        node_id=node_id,
        term=term,
        last_flushed=flushed,
        last_dirty=dirty,
        result=result,
        **rest,
    )


def entries(
    leader_id: int,
    term: int,
    batches: bytes = b"",
    *,
    prev_offset: int = -1,
    prev_term: int = 0,
    commit: int = -1,
    flush: bool = False,
) -> AppendEntries:
    """An AppendEntries of group 0 (from the start of the log unless `prev_offset`)."""
    return AppendEntries(
        group=0,
        term=term,
        leader_id=leader_id,
        prev_offset=prev_offset,
        prev_term=prev_term,
        leader_commit=commit,
        batches=batches,
        flush=flush,
    )


def make_core(
    node_id: int = 1,
    term: int = 1,
    now: float = 0.0,
    config: Configuration | None = BOOTSTRAP,
    log_config: LogConfig | None = None,
    settings: RaftSettings = SETTINGS,
) -> RaftCore:
    fs = MemoryFileSystem()
    log = Log.open(fs, "/log", log_config, run_sync=run_inline)
    wire = config.to_wire() if config is not None else None
    meta = ConsensusMetadata("x", current_term=term, config=wire)
    core = RaftCore(node_id, 0, log, meta, settings, random.Random(node_id), now)
    # No peer's node looks alive, so a core campaigns as soon as its own timer runs out:
    # the turns of the group's election order are tested on their own.
    reach_only(core, alive=set())
    return core


def reach_only(core: RaftCore, alive: set[int]) -> None:
    """Tell the core that its node reaches those members' nodes, and not the others'."""
    members = core.config.members if core.config is not None else frozenset()
    core.observe(replace(core.conditions, unreachable=frozenset(members - alive - {core.id})))


def elect(core: RaftCore, now: float = 10.0) -> None:
    """Make `core` the leader of the next term with votes from 2 and 3."""
    core.tick(now)  # election deadline passed: pre-vote
    term = core.term + 1
    for peer in (2, 3):
        core.step(
            peer, VoteReply(group=0, node_id=peer, term=term, granted=True, pre_vote=True), now
        )
    for peer in (2, 3):
        core.step(
            peer,
            VoteReply(group=0, node_id=peer, term=core.term, granted=True, pre_vote=False),
            now,
        )
    assert core.role is Role.LEADER
    core.take_outbox()


def propose(core: RaftCore, batch: bytes, now: float, awaited: bool) -> tuple[int, int]:
    (offsets,) = core.propose([Proposal(split_batches(batch), awaited)], now)
    return offsets


def caught_up_leader(settings: RaftSettings = SETTINGS) -> RaftCore:
    """A leader whose follower 2 holds its barrier (offset 0), nothing in flight."""
    core = make_core(settings=settings)
    elect(core)
    core.step(
        2,
        append_reply(2, core.term, 0, 0),
        10.0,
    )
    return core


def first_message_to(leader: RaftCore, node_id: int) -> AppendEntries:
    leader.pump()
    sent = [m for to, m in leader.take_outbox() if to == node_id]
    return next(m for m in sent if isinstance(m, AppendEntries))
