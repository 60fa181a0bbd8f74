"""The `__transactions` state machine: a transaction's life, fencing by epoch, commands
decided on a state that moved on, timeouts, the wire form and snapshots; and, over random
command sequences, that a fenced epoch never ends a transaction and that a snapshot taken
at any point rebuilds the same state."""

from __future__ import annotations

import random

import msgpack
import pytest

from quorumlog.transactions.state import (
    EPOCH_MAX,
    AddPartitions,
    CommandError,
    Complete,
    Expire,
    InitProducer,
    Prepare,
    Snapshot,
    TransactionsState,
    Txn,
    TxnState,
    from_wire,
    next_producer,
    snapshot_of,
    to_wire,
    transactions_partition,
)

ID = "orders-to-invoices"
TP = ("invoices", 0), ("invoices", 1)


class Applier:
    def __init__(self) -> None:
        self.state = TransactionsState()
        self.offset = -1

    def __call__(self, command) -> str | None:
        self.offset += 1
        return self.state.apply(command, self.offset)

    def txn(self) -> Txn:
        return self.state.ids[ID]


def test_a_transaction_commits_through_prepare_and_complete():
    apply = Applier()
    assert apply(InitProducer(ID, 77, 0, 60_000, (-1, -1), now_ms=1_000)) is None
    assert apply.txn().state is TxnState.EMPTY and apply.txn().producer == (77, 0)
    assert apply(AddPartitions(ID, 77, 0, TP[:1], now_ms=2_000)) is None
    assert apply(AddPartitions(ID, 77, 0, TP[1:], now_ms=2_500)) is None
    txn = apply.txn()
    assert txn.state is TxnState.ONGOING and txn.partitions == set(TP)
    assert txn.started_ms == 2_000, "the transaction began with its first partition"
    assert apply(Prepare(ID, 77, 0, commit=True, now_ms=3_000)) is None
    assert apply.state.preparing() == [(ID, apply.txn())]
    assert apply(AddPartitions(ID, 77, 0, TP, now_ms=3_100)) is not None, "it is ending"
    assert apply(Complete(ID, 77, 0, now_ms=3_200)) is None
    txn = apply.txn()
    assert txn.state is TxnState.COMPLETE_COMMIT and not txn.partitions and txn.started_ms == -1
    assert apply.state.preparing() == []
    # The next transaction of the same session starts afresh.
    assert apply(AddPartitions(ID, 77, 0, TP[1:], now_ms=4_000)) is None
    assert apply.txn().partitions == {TP[1]} and apply.txn().started_ms == 4_000


def test_a_new_session_fences_the_old_one():
    apply = Applier()
    apply(InitProducer(ID, 77, 0, 60_000, (-1, -1), now_ms=0))
    apply(AddPartitions(ID, 77, 0, TP, now_ms=10))
    # The new session finds a transaction open: its coordinator aborts it at the next
    # epoch first (the old session can no longer end it), then starts the session.
    assert apply(InitProducer(ID, 77, 1, 60_000, (77, 0), now_ms=20)) is not None
    assert apply(Prepare(ID, 77, 1, commit=False, now_ms=20)) is None
    assert apply(Prepare(ID, 77, 0, commit=True, now_ms=21)) is not None
    assert apply(Complete(ID, 77, 0, now_ms=22)) is not None, "the old epoch completes nothing"
    assert apply(Complete(ID, 77, 1, now_ms=22)) is None
    assert apply.txn().state is TxnState.COMPLETE_ABORT
    assert apply(InitProducer(ID, 77, 2, 60_000, (77, 1), now_ms=30)) is None
    for old in (0, 1):
        assert apply(AddPartitions(ID, 77, old, TP, now_ms=40)) is not None
    assert apply(AddPartitions(ID, 77, 2, TP, now_ms=40)) is None
    assert apply(Prepare(ID, 77, 3, commit=True, now_ms=50)) is not None, (
        "only an abort fences: a commit comes from the producer's own epoch"
    )


def test_a_command_decided_on_a_state_that_moved_on_changes_nothing():
    apply = Applier()
    apply(InitProducer(ID, 77, 0, 60_000, (-1, -1), now_ms=0))
    # Two sessions starting at once: both were decided on epoch 0, one wins.
    assert apply(InitProducer(ID, 77, 1, 60_000, (77, 0), now_ms=1)) is None
    assert apply(InitProducer(ID, 77, 1, 60_000, (77, 0), now_ms=1)) is not None
    assert apply.txn().producer == (77, 1)
    assert apply(AddPartitions(ID, 99, 1, TP, now_ms=2)) is not None, "another producer's"
    assert apply(AddPartitions("unknown", 77, 1, TP, now_ms=2)) is not None


def test_open_transactions_past_their_timeout_are_found():
    apply = Applier()
    apply(InitProducer(ID, 77, 0, 1_000, (-1, -1), now_ms=0))
    apply(InitProducer("other", 78, 0, 5_000, (-1, -1), now_ms=0))
    apply(AddPartitions(ID, 77, 0, TP, now_ms=100))
    apply(AddPartitions("other", 78, 0, TP, now_ms=100))
    assert apply.state.timed_out(now_ms=1_100) == []
    assert [name for name, _ in apply.state.timed_out(now_ms=1_101)] == [ID]


def test_an_idle_id_expires_unless_it_changed():
    apply = Applier()
    apply(InitProducer(ID, 77, 0, 1_000, (-1, -1), now_ms=0))
    apply(AddPartitions(ID, 77, 0, TP, now_ms=1))
    assert apply(Expire(ID, 77, 0)) is not None, "a transaction is open"
    apply(Prepare(ID, 77, 0, commit=False, now_ms=2))
    apply(Complete(ID, 77, 0, now_ms=3))
    assert apply(Expire(ID, 77, 0)) is None and ID not in apply.state.ids


def test_the_next_session_takes_the_next_epoch_or_a_new_number():
    assert next_producer(None, 5) == (5, 0)
    assert next_producer(Txn(77, 3, 1_000), 5) == (77, 4)
    assert next_producer(Txn(77, EPOCH_MAX, 1_000), 5) == (5, 0)


def test_every_command_survives_its_wire_form():
    commands = [
        InitProducer(ID, 77, 0, 60_000, (-1, -1), now_ms=1),
        AddPartitions(ID, 77, 0, TP, now_ms=2),
        Prepare(ID, 77, 0, commit=True, now_ms=3),
        Complete(ID, 77, 0, now_ms=4),
        Expire(ID, 77, 0),
    ]
    apply = Applier()
    for command in commands[:2]:
        apply(command)
    commands.append(snapshot_of(apply.state))
    for command in commands:
        wire = msgpack.unpackb(msgpack.packb(to_wire(command)), raw=False)
        assert from_wire(wire) == command


@pytest.mark.parametrize(
    "wire",
    [
        [],
        {"type": "Launch"},
        {"type": "Prepare", "transactional_id": ID},
        {
            "type": "AddPartitions",
            "transactional_id": ID,
            "number": 1,
            "epoch": 0,
            "partitions": [["t"]],
            "now_ms": 0,
        },
        {"type": "Snapshot", "ids": [{"id": ID, "state": "sleeping"}]},
    ],
)
def test_a_malformed_command_is_refused_as_it_is_read(wire):
    with pytest.raises(CommandError):
        from_wire(wire)


def test_ids_spread_over_the_partitions_by_a_stable_hash():
    assert transactions_partition(ID, 8) == transactions_partition(ID, 8)
    assert len({transactions_partition(f"id-{i}", 8) for i in range(100)}) == 8


def random_command(rng: random.Random, state: TransactionsState, now_ms: int, fresh: int):
    """What a coordinator, or a stale one, or a zombie producer's call, might append
    (`fresh`: a number no producer had, as a coordinator draws one)."""
    name = rng.choice(["a", "b", "c"])
    txn = state.ids.get(name)
    number, epoch = txn.producer if txn is not None else (rng.randrange(3), 0)
    if rng.random() < 0.25:  # a stale or fenced caller
        epoch = max(0, epoch - rng.randrange(1, 3))
    roll = rng.random()
    if roll < 0.2:
        nxt = next_producer(txn, fresh)
        prior = txn.producer if txn is not None else (-1, -1)
        return InitProducer(name, *nxt, 1_000, prior, now_ms)
    if roll < 0.45:
        tps = tuple(rng.sample([("t", 0), ("t", 1), ("u", 0)], rng.randrange(1, 3)))
        return AddPartitions(name, number, epoch, tps, now_ms)
    if roll < 0.65:
        fence = rng.random() < 0.3
        return Prepare(
            name, number, epoch + fence, commit=not fence and rng.random() < 0.6, now_ms=now_ms
        )
    if roll < 0.9:
        return Complete(name, number, epoch, now_ms)
    if roll < 0.95:
        return Expire(name, number, epoch)
    return snapshot_of(state)


@pytest.mark.parametrize("seed", range(40))
def test_a_fenced_epoch_never_ends_a_transaction_and_snapshots_rebuild_the_state(seed):
    rng = random.Random(seed)
    apply = Applier()
    highest: dict[tuple[str, int], int] = {}  # (id, number) -> the highest epoch applied
    for step in range(300):
        before = {name: txn for name, txn in apply.state.ids.items()}
        command = random_command(rng, apply.state, now_ms=step * 10, fresh=1_000 + step)
        why = apply(command)
        if isinstance(command, Snapshot):
            continue
        name = command.transactional_id
        key = (name, command.number)
        if why is None and isinstance(command, Prepare | Complete | AddPartitions):
            assert command.epoch >= highest.get(key, 0), "a fenced epoch changed a transaction"
        if why is None and isinstance(command, Prepare) and command.commit:
            assert before[name].state is TxnState.ONGOING
            assert command.epoch == before[name].epoch, "a commit at another epoch"
        if why is None and name in apply.state.ids:
            highest[key] = max(highest.get(key, 0), apply.state.ids[name].epoch)
        if why is not None:
            assert apply.state.ids.get(name) == before.get(name), "a refused command changed it"
        rebuilt = TransactionsState()
        rebuilt.apply(from_wire(to_wire(snapshot_of(apply.state))), 0)
        assert rebuilt.ids == apply.state.ids


def test_a_log_applied_from_after_its_start_waits_for_its_first_snapshot():
    before = Applier()
    before(InitProducer(ID, 77, 0, 1_000, (-1, -1), now_ms=0))
    later = TransactionsState(whole=False)
    assert later.apply(AddPartitions(ID, 77, 0, TP, now_ms=1), 5) is not None
    assert later.apply(snapshot_of(before.state), 6) is None
    assert later.whole and later.ids == before.state.ids
