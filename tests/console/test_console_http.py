"""The console's HTTP listener on in-memory streams, with trio's clock jumping ahead: a
connection that idles, breaks off, sends garbage or meets a failing handler ends by itself
and raises nothing into the node's nursery (where it would stop the node)."""

from __future__ import annotations

import structlog
import structlog.testing
import trio
import trio.testing

from quorumlog.console.http import IDLE_S, Request, Response, _connection

GET = b"GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n"


async def answer(request: Request) -> Response:
    if request.path == "/fail":
        raise RuntimeError("a bug in a page")
    return Response(200, request.path.encode(), "text/plain")


async def served(client: trio.abc.Stream, server: trio.abc.Stream, talk) -> bytes:
    """What the client received while `talk` ran against one served connection; the
    connection's task must end by itself (not by cancellation), without raising, and
    without the catch-all that keeps the node up having anything to log."""
    with structlog.testing.capture_logs() as logs:
        received = await _serve_one(client, server, talk)
    assert [e["event"] for e in logs if e["log_level"] == "error"] in (
        [],
        ["console_request_failed"],  # a page that raised (answered 500)
    )
    return received


async def _serve_one(client: trio.abc.Stream, server: trio.abc.Stream, talk) -> bytes:
    received = bytearray()
    ended = trio.Event()

    async def serve() -> None:
        await _connection(answer, trio.CapacityLimiter(1), server)
        ended.set()

    async def read() -> None:
        try:
            while data := await client.receive_some(65536):
                received.extend(data)
        except trio.ClosedResourceError:
            pass  # closed by `talk`: a client that left

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        nursery.start_soon(read)
        await talk(client)
        with trio.fail_after(IDLE_S * 3):
            await ended.wait()
        nursery.cancel_scope.cancel()
    return bytes(received)


async def test_an_idle_connection_is_closed(autojump_clock):
    client, server = trio.testing.memory_stream_pair()

    async def nothing(c):
        pass

    assert await served(client, server, nothing) == b""


async def test_a_kept_alive_connection_that_goes_idle_is_closed(autojump_clock):
    client, server = trio.testing.memory_stream_pair()

    async def one_request(c):
        await c.send_all(GET)

    received = await served(client, server, one_request)
    assert received.startswith(b"HTTP/1.1 200 OK") and received.endswith(b"/x")


async def test_a_request_cut_off_midway_ends_its_connection_only(autojump_clock):
    async def half_then_gone(c):
        await c.send_all(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
        await c.aclose()

    async def reader_gone(c):  # garbage, and the client leaves before the 400 is sent
        await c.send_all(b"GARBAGE\r\n\r\n")
        await c.aclose()

    for talk in (half_then_gone, reader_gone):
        client, server = trio.testing.memory_stream_pair()
        assert await served(client, server, talk) == b""


async def test_a_failing_page_is_a_500_and_the_connection_goes_on(autojump_clock):
    client, server = trio.testing.memory_stream_pair()

    async def fail_then_ask(c):
        await c.send_all(b"GET /fail HTTP/1.1\r\nHost: h\r\n\r\n" + GET)

    received = await served(client, server, fail_then_ask)
    assert received.startswith(b"HTTP/1.1 500 Internal Server Error")
    assert b"HTTP/1.1 200 OK" in received


async def test_a_slow_request_is_given_up(autojump_clock):
    client, server = trio.testing.memory_stream_pair()

    async def dribble(c):
        await c.send_all(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n")
        await trio.sleep(IDLE_S * 2)  # and never the body

    assert await served(client, server, dribble) == b""
