"""How a client call picks brokers: the rules of quorumlog/client/routing.py's Attempts, one at a
time, without a cluster."""

from __future__ import annotations

import random

import pytest

from quorumlog.client.errors import UnknownTopicError, UnreachableError
from quorumlog.client.routing import Router
from quorumlog.transport.messages import ErrorCode, ErrorReply

BROKERS = ["a:1", "b:1", "c:1"]


def not_leader(hint: str | None) -> ErrorReply:
    return ErrorReply(ErrorCode.NOT_LEADER, "not the leader", 3 if hint else None, hint)


def test_a_fresh_hint_is_followed_at_once():
    attempts = Router(BROKERS, direct=False, rng=random.Random(1)).call()
    assert attempts.pick(to_leader=True) == "a:1"
    assert attempts.on_reply("a:1", not_leader("c:1")) is False
    assert attempts.pause_s() == 0.0
    assert attempts.pick(to_leader=True) == "c:1"


def test_a_hint_naming_a_broker_that_just_failed_is_ignored_then_believed():
    attempts = Router(BROKERS, direct=False, rng=random.Random(1)).call()
    assert attempts.pick(to_leader=True) == "a:1"
    attempts.on_unreachable("a:1", UnreachableError("restarting"))  # it comes back as leader
    picks = []
    for _ in range(8):
        address = attempts.pick(to_leader=True)
        picks.append(address)
        if address == "a:1":
            break
        attempts.on_reply(address, not_leader("a:1"))  # the others name it, rightly
    assert picks[:2] == ["b:1", "c:1"], "the stale-looking hint is ignored at first"
    assert picks[-1] == "a:1", f"but believed once the others were asked again: {picks}"


def test_unknown_topic_from_a_node_that_names_the_controller_leader_is_not_an_answer():
    """A node whose copy of the cluster state lags says "unknown, ask node 3": the call
    goes on (there, or elsewhere while node 3 cannot be reached), and only an answer
    naming nobody (the controller's leader's own) ends it."""
    attempts = Router(BROKERS, direct=False, rng=random.Random(1)).call()
    assert attempts.pick(to_leader=True) == "a:1"
    attempts.on_unreachable("a:1", UnreachableError("restarting"))
    address = attempts.pick(to_leader=True)
    lagging = ErrorReply(ErrorCode.UNKNOWN_TOPIC, "unknown topic 't'", 1, "a:1")
    assert attempts.on_reply(address, lagging) is False  # a:1 just failed: not followed
    final = ErrorReply(ErrorCode.UNKNOWN_TOPIC, "unknown topic 't'")
    with pytest.raises(UnknownTopicError):
        attempts.on_reply(attempts.pick(to_leader=True), final)
