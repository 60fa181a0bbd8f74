"""The Kafka listener's connections: read frames, answer each request, in order.

Requests on one connection are handled concurrently (a producer pipelines its appends,
a consumer's fetch waits) but answered in the order they came, as Kafka's protocol
requires: each request gets a slot in a queue that one writer task drains in order. A
frame that is not a Kafka request closes its connection, never the listener; an API or
version not served is answered with Kafka's UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import random
from functools import partial
from typing import TYPE_CHECKING

import structlog
import trio

from quorumlog.actors.kafka.api import Answer, KafkaApi
from quorumlog.actors.kafka.cluster import KafkaBrokers, host_port
from quorumlog.actors.kafka.sasl import SaslRefused, SaslSession
from quorumlog.actors.mailbox import Pending
from quorumlog.transport import kafka

if TYPE_CHECKING:
    from quorumlog.actors.node import Node

logger = structlog.get_logger("quorumlog.kafka")

IN_FLIGHT_MAX = 32  # requests per connection being answered at once
RECEIVE_BYTES = 256 * 1024


async def serve_kafka(
    node: Node,
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
    send, receive = trio.open_memory_channel[Pending](IN_FLIGHT_MAX)
    host = _client_host(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_write_answers, stream, receive, nursery.cancel_scope)
        async with send:
            try:
                async for frame in _frames(stream):
                    request = kafka.parse_request(frame)
                    sasl.check(request.api_key)
                    slot = Pending()
                    await send.send(slot)
                    if request.body is None:
                        slot.resolve(kafka.unsupported_response(request))
                        continue
                    answer = await api.submit(request, sasl, host)
                    nursery.start_soon(_answer, request, answer, slot)
            except (kafka.FrameError, SaslRefused) as exc:
                logger.warning("kafka_connection_refused", error=str(exc))
                send.close()  # the answers so far go out, then the connection closes
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                nursery.cancel_scope.cancel()


def _client_host(stream: trio.SocketStream) -> str:
    """The client's address as Kafka shows it ("/127.0.0.1"); "" if it is gone already."""
    try:
        return "/" + str(stream.socket.getpeername()[0])
    except OSError:
        return ""


async def _answer(request: kafka.Request, answer: Answer, slot: Pending) -> None:
    try:
        values = await answer()
        slot.resolve(None if values is None else kafka.encode_response(request, values))
    except Exception:
        # A bug in a handler (or in what it answered): the client gets an error and the
        # connection stays up.
        logger.exception("kafka_handler_failed", api_key=request.api_key, version=request.version)
        slot.resolve(kafka.error_response(request))


async def _write_answers(
    stream: trio.SocketStream, slots: trio.MemoryReceiveChannel, scope: trio.CancelScope
) -> None:
    """Each answer in the order its request came; a client gone ends the connection. The
    answers ready behind the first go out with it, in one send (a producer pipelining its
    appends gets many answers a round: one send each was a seventh of the leader's time)."""
    async with slots:
        try:
            next_slot = None
            while True:
                try:
                    slot = next_slot or await slots.receive()
                except trio.EndOfChannel:
                    return
                next_slot = None
                parts = [await slot.wait()]
                while True:
                    try:
                        behind = slots.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    if not behind.done:
                        next_slot = behind  # its turn comes after this send
                        break
                    parts.append(await behind.wait())
                data = b"".join(p for p in parts if p is not None)
                if data:
                    await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            scope.cancel()


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
