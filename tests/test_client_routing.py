"""How a client call picks brokers: the rules of quorumlog/protocol.py's Attempts, one at a
time, without a cluster."""

from __future__ import annotations

import random

from quorumlog.errors import UnreachableError
from quorumlog.protocol import Router
from transport.messages import ErrorCode, ErrorReply

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
