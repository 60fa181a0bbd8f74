"""The Kafka listener's connections: read frames, answer each request, in order.

Requests on one connection are handled concurrently (a producer pipelines its appends,
a consumer's fetch waits) but answered in the order they came, as Kafka's protocol
requires: each request gets a slot in a queue that one writer task drains in order. A
frame that is not a Kafka request closes its connection, never the listener; an API or
version not served is answered with Kafka's UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import structlog
import trio

from quorumlog.actors.kafka.api import Answer, KafkaApi
from quorumlog.actors.kafka.cluster import KafkaBrokers, host_port
from quorumlog.actors.kafka.produce import ProduceAnswer
from quorumlog.actors.kafka.sasl import SaslRefused, SaslSession
from quorumlog.transport import kafka

if TYPE_CHECKING:
    from quorumlog.actors.kafka.host import KafkaHost

logger = structlog.get_logger("quorumlog.kafka")

IN_FLIGHT_MAX = 32  # requests per connection being answered at once
RECEIVE_BYTES = 256 * 1024


async def serve_kafka(
    node: KafkaHost,
    address: str,
    rng: random.Random,
    secret: bytes | None = None,
    auto_create: tuple[int, int] | None = None,
    *,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve Kafka clients on `address` until cancelled; with a secret, SASL/PLAIN first.
    `auto_create`: (partitions, replicas) of a topic a client's Metadata names unknown."""
    brokers = KafkaBrokers(node, address)
    api = KafkaApi(node, brokers, rng, auto_create)
    host, port = host_port(address)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(brokers.run)
        nursery.start_soon(api.groups.run)
        nursery.start_soon(api.consumer_groups.run)
        listeners = await nursery.start(
            partial(trio.serve_tcp, host=host), _connection_handler(api, secret), port
        )
        logger.info("kafka_listening", node_id=node.id, address=address)
        task_status.started(listeners)


def _connection_handler(api: KafkaApi, secret: bytes | None):
    async def handle(stream: trio.SocketStream) -> None:
        try:
            await _serve_connection(api, stream, SaslSession(secret))
        except Exception:
            logger.exception("kafka_connection_failed")  # a bug: this connection only
        finally:
            await trio.aclose_forcefully(stream)

    return handle


async def _serve_connection(api: KafkaApi, stream: trio.SocketStream, sasl: SaslSession) -> None:
    answers = _Answers(stream)
    host = _client_host(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answers.write, nursery.cancel_scope)
        try:
            async for frame in _frames(stream):
                request = kafka.parse_request(frame)
                sasl.check(request.api_key)
                # Without passing through the scheduler while there is room: the requests
                # read together reach their groups' mailboxes together (one round).
                slot = await answers.slot()
                if request.body is None:
                    slot.resolve(kafka.unsupported_response(request))
                    continue
                answer = await api.submit(request, sasl, host)
                if isinstance(answer, ProduceAnswer):
                    # No task: the appends' answers complete it (or its timeout, the writer).
                    slot.expires(answer.deadline, partial(_expired, request, answer, slot))
                    answer.when_complete(partial(_complete, request, slot))
                else:
                    nursery.start_soon(_answer, request, answer, slot)
        except (kafka.FrameError, SaslRefused) as exc:
            logger.warning("kafka_connection_refused", error=str(exc))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            nursery.cancel_scope.cancel()
        answers.close()  # the answers so far go out, then the connection closes


def _client_host(stream: trio.SocketStream) -> str:
    """The client's address as Kafka shows it ("/127.0.0.1"); "" if it is gone already."""
    try:
        return "/" + str(stream.socket.getpeername()[0])
    except OSError:
        return ""


async def _answer(request: kafka.Request, answer: Answer, slot: _Slot) -> None:
    try:
        values = await answer()
    except Exception:
        # A bug in a handler: the client gets an error and the connection stays up.
        logger.exception("kafka_handler_failed", api_key=request.api_key, version=request.version)
        slot.resolve(kafka.error_response(request))
        return
    _complete(request, slot, values)


def _complete(request: kafka.Request, slot: _Slot, values: dict | None) -> None:
    try:
        slot.resolve(None if values is None else kafka.encode_response(request, values))
    except Exception:
        # A bug in what a handler answered: as above.
        logger.exception("kafka_handler_failed", api_key=request.api_key, version=request.version)
        slot.resolve(kafka.error_response(request))


def _expired(request: kafka.Request, answer: ProduceAnswer, slot: _Slot) -> None:
    _complete(request, slot, answer.expire())


class _Slot:
    """One request's place in its connection's answers: its bytes once answered (None:
    no response, as for acks=0), and when it gives up waiting."""

    __slots__ = ("_answers", "data", "deadline", "done", "expire")

    def __init__(self, answers: _Answers) -> None:
        self._answers = answers
        self.done = False
        self.data: bytes | None = None
        self.deadline = math.inf
        self.expire: Callable[[], None] | None = None

    def expires(self, deadline: float, expire: Callable[[], None]) -> None:
        self.deadline, self.expire = deadline, expire

    def resolve(self, data: bytes | None) -> None:
        if not self.done:
            self.done, self.data = True, data
            self._answers.resolved(self)


class _Answers:
    """A connection's answers, sent in the order their requests came by one writer; the
    answers ready behind the first go out with it in one send (a producer pipelining its
    appends gets many answers a round: one send each was a seventh of the leader's time).
    At most IN_FLIGHT_MAX requests wait for their answers: the reader waits for room."""

    def __init__(self, stream: trio.abc.SendStream) -> None:
        self._stream = stream
        self._slots: deque[_Slot] = deque()
        self._room = trio.Semaphore(IN_FLIGHT_MAX)
        self._wake = trio.Event()
        self._closed = False

    async def slot(self) -> _Slot:
        try:
            self._room.acquire_nowait()
        except trio.WouldBlock:
            await self._room.acquire()
        slot = _Slot(self)
        self._slots.append(slot)
        if len(self._slots) == 1:
            self._wake.set()  # a new first slot: its deadline is the writer's
        return slot

    def resolved(self, slot: _Slot) -> None:
        if self._slots and self._slots[0] is slot:
            self._wake.set()

    def close(self) -> None:
        """No more requests: the writer ends once every answer so far is sent."""
        self._closed = True
        self._wake.set()

    async def write(self, scope: trio.CancelScope) -> None:
        slots = self._slots
        try:
            while slots or not self._closed:
                if not slots or not slots[0].done:
                    await self._wait_for_first()
                    continue
                parts = []
                while slots and slots[0].done:
                    data = slots.popleft().data
                    if data is not None:
                        parts.append(data)
                    self._room.release()
                if parts:
                    await self._stream.send_all(b"".join(parts))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            scope.cancel()
            return
        scope.cancel()  # the reader is done, and every answer sent

    async def _wait_for_first(self) -> None:
        """Until the first slot is answered (or a first slot comes, or the reader ends);
        a first slot whose deadline passed is answered as it stands."""
        first = self._slots[0] if self._slots else None
        if first is not None and first.expire is not None and trio.current_time() >= first.deadline:
            first.expire()
            return
        self._wake = trio.Event()
        with trio.move_on_at(first.deadline if first is not None else math.inf):
            await self._wake.wait()


async def _frames(stream: trio.SocketStream):
    """Each request's bytes (after its size) until the client closes; FrameError on a size
    no request has."""
    buffer = bytearray()
    while True:
        while len(buffer) < 4 or len(buffer) < 4 + int.from_bytes(buffer[:4], "big", signed=True):
            if len(buffer) >= 4:
                _check_size(int.from_bytes(buffer[:4], "big", signed=True))
            data = await stream.receive_some(RECEIVE_BYTES)
            if not data:
                if buffer:
                    raise kafka.FrameError(
                        f"connection closed inside a frame ({len(buffer)} bytes)"
                    )
                return
            buffer += data
        size = int.from_bytes(buffer[:4], "big", signed=True)
        _check_size(size)
        yield bytes(buffer[4 : 4 + size])
        del buffer[: 4 + size]


def _check_size(size: int) -> None:
    if not 8 <= size <= kafka.FRAME_BYTES_MAX:
        raise kafka.FrameError(f"a frame of {size} bytes (at most {kafka.FRAME_BYTES_MAX})")
