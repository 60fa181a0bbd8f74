"""Where a client call goes: the leader each call needs (`route_of`), which broker to
ask next from the hints replies give (`Router`, `Attempts`), and the errors that end a
call (`error_from`)."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Hashable

from quorumlog.client.errors import (
    CallTimeoutError,
    GroupActiveError,
    InvalidRecordError,
    NotLeaderError,
    NotMemberError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    QuorumLogError,
    RefusedError,
    TooLargeError,
    TopicExistsError,
    UnknownGroupError,
    UnknownTopicError,
    UnreachableError,
)
from quorumlog.transport.messages import (
    AdminReply,
    AppendReply,
    ErrorCode,
    ErrorReply,
    GroupRequest,
    Message,
    PartitionCall,
)

NO_ANSWER = "no broker answered"
BACKOFF_S_MIN = 0.02
BACKOFF_S_MAX = 0.25  # about an election's worth: rediscovery is quick


def error_from(reply: ErrorReply) -> QuorumLogError:
    match reply.code:
        case ErrorCode.NOT_LEADER:
            return NotLeaderError(reply.message, reply.leader_id, reply.leader_address)
        case ErrorCode.OFFSET_OUT_OF_RANGE:
            return OffsetOutOfRangeError(reply.message)
        case ErrorCode.TOO_LARGE:
            return TooLargeError(reply.message)
        case ErrorCode.TIMEOUT:
            return CallTimeoutError(reply.message)
        case ErrorCode.UNKNOWN:
            return OutcomeUnknownError(reply.message)
        case ErrorCode.UNKNOWN_TOPIC:
            return UnknownTopicError(reply.message)
        case ErrorCode.NOT_MEMBER:
            return NotMemberError(reply.message)
        case ErrorCode.REFUSED:
            return refusal(reply.message)
        case ErrorCode.INVALID_RECORD:
            return InvalidRecordError(reply.message)
        case _:
            return QuorumLogError(f"{reply.code.name.lower()}: {reply.message}")


# The refusals a program acts on, each its own class. The nodes refuse with one code and a
# message (controller/state.py, consumers/state.py); these are their words.
REFUSALS: tuple[tuple[re.Pattern[str], type[RefusedError]], ...] = (
    (re.compile(r"topic '.*' exists"), TopicExistsError),
    (re.compile(r"unknown group '.*'"), UnknownGroupError),
    (re.compile(r"group '.*' has (\d+ )?active (Kafka )?member"), GroupActiveError),
)


def refusal(message: str) -> RefusedError:
    """A REFUSED reply as its error (the text as before: "refused: <why>")."""
    kind = next((k for pattern, k in REFUSALS if pattern.match(message)), RefusedError)
    return kind(f"refused: {message}")


# Leadership moved, is moving, or another change is under way: ask again, the leader of
# the moment. Appends are idempotent and admin calls re-plan, so retrying is safe.
RETRIABLE = frozenset(
    {ErrorCode.NOT_LEADER, ErrorCode.UNKNOWN, ErrorCode.BUSY, ErrorCode.STEPPING_DOWN}
)


LEADER_REPLIES = (AppendReply, AdminReply)


def route_of(message: Message) -> Hashable:
    """Which leader a call goes to: a partition's, a consumer group's coordinator, or
    (admin calls) the controller's."""
    if isinstance(message, PartitionCall):
        return (message.topic, message.partition)
    if isinstance(message, GroupRequest):
        return ("group", message.group)
    return CONTROLLER_ROUTE


CONTROLLER_ROUTE = "controller"


# Refused dials in a row at every broker, for at least this long, end a call before its
# timeout: nothing listens there. Not sooner: nodes just started take a moment to listen.
REFUSALS_MAX = 2
REFUSED_FOR_S_MIN = 2.0


class Router:
    """The brokers and the leader hints of one client (per partition, and the controller's),
    shared by all its calls."""

    def __init__(self, brokers: list[str], direct: bool, rng: random.Random):
        self.brokers = brokers
        self.direct = direct
        self.leaders: dict[Hashable, str] = {}
        self.rng = rng

    def call(self, route: Hashable = CONTROLLER_ROUTE) -> Attempts:
        return Attempts(self, route)


class Attempts:
    """One call's tries: which broker to ask next, from the hints replies give, and how
    long to wait before asking. A hint that names a broker that just failed is stale (the
    survivors still name the dead leader until they elect a new one) and is ignored; a
    fresh hint is followed at once, without backing off. "Just": until every broker has
    been asked once more, since a node that failed while restarting may lead by now."""

    def __init__(self, router: Router, route: Hashable):
        self._router = router
        self._route = route
        self._failed: dict[str, int] = {}  # broker -> tries made when it failed
        self._refusals: dict[str, int] = {}  # broker -> refused dials in a row
        self._refused_since: float | None = None  # the first of the refusals in a row
        self._tried: list[str] = []
        self._fresh_hint = False
        self.problem = NO_ANSWER  # why the last try did not end the call

    def _just_failed(self, address: str | None) -> bool:
        failed_at = self._failed.get(address) if address is not None else None
        return failed_at is not None and len(self._tried) - failed_at <= len(self._router.brokers)

    def pick(self, to_leader: bool) -> str:
        router = self._router
        if router.direct:
            return router.brokers[0]
        leader = router.leaders.get(self._route)
        if to_leader and leader and not self._just_failed(leader):
            address = leader
        else:
            brokers = router.brokers
            untried = [b for b in brokers if b not in self._tried and b not in self._failed]
            alive = [b for b in brokers if not self._just_failed(b)] or brokers
            address = untried[0] if untried else router.rng.choice(alive)
        self._tried.append(address)
        return address

    def asking(self, address: str) -> None:
        """A try at `address` begins: if the call's time runs out before it answers, that
        is why (not "no broker answered": one did not answer yet)."""
        if self.problem == NO_ANSWER:
            self.problem = f"{address} did not answer in time"

    def on_reply(self, address: str, reply) -> bool:
        """True if the reply is the answer; False to try again; raises a definite error.

        Retrying is safe: appends are idempotent, everything else only reads.
        """
        router = self._router
        self._failed.pop(address, None)
        if not isinstance(reply, ErrorReply):
            if isinstance(reply, LEADER_REPLIES):
                router.leaders[self._route] = address  # only a leader answers these
            return True
        hint = reply.leader_address
        fresh = hint is not None and hint != address and not self._just_failed(hint)
        # An unknown topic that names a node: "I may be behind, ask the controller's
        # leader". Not an answer, even when that node cannot be asked right now.
        ask_there = reply.code is ErrorCode.UNKNOWN_TOPIC and reply.leader_id is not None
        if (reply.code not in RETRIABLE and not ask_there) or router.direct:
            raise error_from(reply)
        self._fresh_hint = fresh
        self.problem = reply.message
        if fresh:
            router.leaders[self._route] = hint
        else:
            router.leaders.pop(self._route, None)
        return False

    def on_unreachable(self, address: str, error: Exception) -> None:
        router = self._router
        if router.direct:
            if isinstance(error, QuorumLogError):
                raise error
            raise UnreachableError(f"{address}: {error}") from None
        self.problem = str(error)
        self._failed[address] = len(self._tried)
        refused = isinstance(error, UnreachableError) and error.refused
        self._refusals[address] = self._refusals.get(address, 0) + 1 if refused else 0
        now = time.monotonic()
        if not refused:
            self._refused_since = None
        elif self._refused_since is None:
            self._refused_since = now
        if (
            all(self._refusals.get(b, 0) >= REFUSALS_MAX for b in router.brokers)
            and self._refused_since is not None
            and now - self._refused_since >= REFUSED_FOR_S_MIN
        ):
            # Nothing listens at any of them: waiting out the timeout would not change that.
            raise UnreachableError(
                f"no quorumlog node listens at any broker ({', '.join(router.brokers)}): "
                f"is the cluster running there? last: {error}",
                refused=True,
            )
        self._fresh_hint = False
        if router.leaders.get(self._route) == address:
            del router.leaders[self._route]

    def on_replaced(self, address: str, leader: str) -> None:
        """The others elected `leader` while `address` went silent: go there at once."""
        self.on_unreachable(address, UnreachableError(f"{address} was replaced by {leader}"))
        self._router.leaders[self._route] = leader
        self._fresh_hint = True

    def pause_s(self) -> float:
        """How long to wait before the next try: nothing when a fresh hint names the leader."""
        if self._fresh_hint:
            self._fresh_hint = False
            return 0.0
        pause = min(BACKOFF_S_MAX, BACKOFF_S_MIN * 2 ** min(len(self._tried), 10))
        return pause * self._router.rng.uniform(0.5, 1.5)
