"""The leader watch (quorumlog/client/leader_watch.py): a call waiting on a leader that went
silent moves on once the other nodes name a newer leader, and not before."""

from __future__ import annotations

import trio

from quorumlog.client.leader_watch import WATCH_AFTER_S, LeaderWatch, Terms
from quorumlog.transport.messages import LeaderReply, LeaderRequest

ROUTE = ("events", 3)
A, B, C = "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"


def test_a_newer_term_naming_another_node_moves_the_call():
    terms = Terms()
    assert terms.newer_leader(ROUTE, A, [LeaderReply(1, A, 4), LeaderReply(1, A, 4)]) is None
    assert terms.newer_leader(ROUTE, A, [LeaderReply(2, B, 5), LeaderReply(1, A, 4)]) == B


def test_a_node_that_lags_naming_an_older_leader_moves_nothing():
    terms = Terms()
    assert terms.newer_leader(ROUTE, A, [LeaderReply(1, A, 4), LeaderReply(3, C, 3)]) is None
    # Once a term is known for A, an answer in that term or older is no reason to leave.
    assert terms.newer_leader(ROUTE, A, [LeaderReply(3, C, 4)]) is None
    assert terms.newer_leader(ROUTE, A, [LeaderReply(None, None, 5)]) is None, "no leader yet"
    assert terms.newer_leader(ROUTE, A, [LeaderReply(None, None, -1)]) is None
    assert terms.newer_leader(ROUTE, A, []) is None


async def test_an_attempt_waiting_on_a_replaced_leader_is_ended(autojump_clock):
    elected = trio.Event()  # the others elect B after a while
    asked = []

    async def ask(broker: str, message):
        assert isinstance(message, LeaderRequest) and (message.topic, message.partition) == ROUTE
        asked.append(broker)
        return LeaderReply(2, B, 5) if elected.is_set() else LeaderReply(1, A, 4)

    watch = LeaderWatch([A, B, C], ask)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        with trio.CancelScope() as attempt:
            waiting = watch.waiting(ROUTE, A, attempt)
            await trio.sleep(WATCH_AFTER_S * 3)
            assert asked and A not in asked, "the others are asked, not the silent one"
            assert waiting.moved_to is None, "they still name A: A is slow, not replaced"
            elected.set()
            await trio.sleep(60)
        assert attempt.cancelled_caught and waiting.moved_to == B
        watch.done(waiting)
        nursery.cancel_scope.cancel()


async def test_an_answered_call_is_never_watched(autojump_clock):
    async def ask(broker, message):
        raise AssertionError("nobody is asked about a call that was answered")

    watch = LeaderWatch([A, B, C], ask)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        with trio.CancelScope() as attempt:
            watch.done(watch.waiting(ROUTE, A, attempt))
            await trio.sleep(WATCH_AFTER_S * 5)
        nursery.cancel_scope.cancel()
