"""An HTTP/1.1 listener on the node's own trio loop: h11 parses, a handler answers.

Small on purpose: a console and a metrics scrape need GET, HEAD and a form's POST, kept
alive between requests. Bad input is answered (400, 413, 431) and closes only its own
connection; a handler that raises is logged and answered 500; nothing stops the node.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

import h11
import structlog
import trio

from quorumlog.transport.addresses import parse_address

logger = structlog.get_logger("quorumlog.console")

HEADERS_BYTES_MAX = 16 * 1024
BODY_BYTES_MAX = 1024 * 1024  # a produce form's record, with room for its encoding
IDLE_S = 30.0  # a kept-alive connection with no request for this long is closed
REQUEST_S = 30.0  # reading one request, headers and body
RECEIVE_BYTES = 64 * 1024
CONNECTIONS_MAX = 128  # served at once (a browser opens about 6 per host)


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # as sent (percent-encoded), without the query
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case
    body: bytes = b""

    def form(self) -> dict[str, str]:
        """The fields of a form POST (application/x-www-form-urlencoded)."""
        return dict(parse_qsl(self.body.decode("utf-8", "replace"), keep_blank_values=True))


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]


class BadRequest(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status


async def serve_http(
    address: str,
    handler: Handler,
    ssl_context: ssl.SSLContext | None = None,
    *,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; started once the address is bound."""
    host, port = parse_address(address)
    listeners: list = await trio.open_tcp_listeners(port, host=host or None)
    if ssl_context is not None:
        listeners = [trio.SSLListener(x, ssl_context, https_compatible=True) for x in listeners]
    task_status.started()
    limit = trio.CapacityLimiter(CONNECTIONS_MAX)
    await trio.serve_listeners(partial(_connection, handler, limit), listeners)


async def _connection(
    handler: Handler, limit: trio.CapacityLimiter, stream: trio.abc.Stream
) -> None:
    try:
        async with limit:  # beyond it, a connection waits its turn
            await _serve_requests(handler, stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        pass  # the other end went away, or would not finish its request
    except Exception:  # one connection's trouble never reaches the node's nursery
        logger.exception("console_connection_failed")
    finally:
        await trio.aclose_forcefully(stream)


async def _serve_requests(handler: Handler, stream: trio.abc.Stream) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEADERS_BYTES_MAX)
    try:
        while True:
            first = None
            with trio.move_on_after(IDLE_S):
                first = await _next_event(conn, stream)
            if not isinstance(first, h11.Request):
                return  # closed, idle, or nothing more to read
            try:
                with trio.fail_after(REQUEST_S):
                    request = await _read_request(conn, stream, first)
            except BadRequest as exc:
                await _send(conn, stream, plain_response(exc.status, str(exc)), close=True)
                return
            response = await _answer(handler, request)
            await _send(conn, stream, response, head=request.method == "HEAD")
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:  # answered, if nothing was sent yet
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            status = exc.error_status_hint
            reason = "request headers too large" if status == 431 else f"bad request: {exc}"
            await _send(conn, stream, plain_response(status, reason), close=True)


async def _answer(handler: Handler, request: Request) -> Response:
    try:
        return await handler(request)
    except Exception:
        logger.exception("console_request_failed", method=request.method, path=request.path)
        return plain_response(500, "internal error: see the node's log")


async def _next_event(conn: h11.Connection, stream: trio.abc.Stream):
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        try:
            data = await stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        conn.receive_data(data)  # b"": closed, which the next event says


async def _read_request(conn: h11.Connection, stream: trio.abc.Stream, head) -> Request:
    if sum(len(name) + len(v) for name, v in head.headers) > HEADERS_BYTES_MAX:
        raise BadRequest(431, "request headers too large")  # h11 checks only what it buffers
    headers = {name.decode("latin-1").lower(): v.decode("latin-1") for name, v in head.headers}
    length = headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > BODY_BYTES_MAX:
        raise BadRequest(413, f"a request body holds at most {BODY_BYTES_MAX} bytes")
    if conn.they_are_waiting_for_100_continue:  # curl's larger POSTs ask first
        await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
    body = bytearray()
    while True:
        event = await _next_event(conn, stream)
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > BODY_BYTES_MAX:
                raise BadRequest(413, f"a request body holds at most {BODY_BYTES_MAX} bytes")
        elif isinstance(event, h11.EndOfMessage):
            break
        else:
            raise trio.BrokenResourceError("closed in the middle of a request")
    target = urlsplit(head.target.decode("latin-1"))
    return Request(
        method=head.method.decode("ascii").upper(),
        path=target.path,
        query=dict(parse_qsl(target.query, keep_blank_values=True)),
        headers=headers,
        body=bytes(body),
    )


async def _send(
    conn: h11.Connection,
    stream: trio.abc.Stream,
    response: Response,
    *,
    head: bool = False,
    close: bool = False,
) -> None:
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        *response.headers,
    ]
    if close:
        headers.append(("connection", "close"))
    reason = HTTPStatus(response.status).phrase.encode()
    out = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
    if not head and response.body:
        out += conn.send(h11.Data(data=response.body))
    out += conn.send(h11.EndOfMessage())
    await stream.send_all(out)


def plain_response(status: int, text: str) -> Response:
    """A one-line text answer (errors, refusals)."""
    return Response(status, (text + "\n").encode(), "text/plain; charset=utf-8")
