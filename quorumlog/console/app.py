"""What the node's HTTP listener answers: `/metrics`, the console's pages, their JSON
under `/api/`, and the static files they use.

With a cluster secret, everything but `/metrics` asks for it (HTTP basic, any user name,
the secret as the password); `/metrics` too with `auth_metrics`. Writes (the produce
form, `POST /api/topics/NAME/records`) are refused unless allowed, and a form posted from
another site is refused (basic auth is sent by browsers to any site's request).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST

from quorumlog.client.errors import OffsetOutOfRangeError, QuorumLogError, UnknownTopicError
from quorumlog.console import pages
from quorumlog.console.data import BadQuery, ConsoleData, NotFound
from quorumlog.console.http import Request, Response, plain_response
from quorumlog.transport.addresses import is_loopback

JSON = "application/json"
STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript"}
# Scripts and styles from this node only, no inline script: a value that slipped past
# escaping still could not run.
SECURITY_HEADERS = [
    (
        "content-security-policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
]
NAME = r"(?P<name>[^/]+)"
PARTITION = r"(?P<partition>\d+)"


@dataclass(frozen=True)
class ConsoleSettings:
    node_id: int
    secret: bytes | None = None
    allow_writes: bool = False
    auth_metrics: bool = False
    tls: bool = False  # the node's client port asks for certificates
    loopback: bool = False  # listening on loopback only: requests must name it so


class Console:
    def __init__(self, settings: ConsoleSettings, data: ConsoleData, metrics: Callable[[], bytes]):
        self.settings = settings
        self.data = data
        self.metrics = metrics
        folder = resources.files("quorumlog.console") / "static"
        self.static = {name: (folder / name).read_bytes() for name in STATIC}
        R = Callable[[Request, dict], Awaitable[Response]]
        self.routes: list[tuple[str, re.Pattern, R]] = [
            ("GET", _path(r"/"), self._cluster),
            ("GET", _path(r"/topics"), self._topics),
            ("GET", _path(rf"/topics/{NAME}"), self._topic),
            ("POST", _path(rf"/topics/{NAME}/produce"), self._produce_form),
            ("GET", _path(rf"/topics/{NAME}/{PARTITION}/messages"), self._messages),
            ("GET", _path(r"/groups"), self._groups),
            ("GET", _path(rf"/groups/{NAME}"), self._group),
            ("GET", _path(r"/api/cluster"), self._api(lambda q, a: data.cluster())),
            ("GET", _path(r"/api/status"), self._api(lambda q, a: data.client.status())),
            ("GET", _path(r"/api/topics"), self._api(lambda q, a: data.topics())),
            ("GET", _path(rf"/api/topics/{NAME}"), self._api(lambda q, a: data.topic(a["name"]))),
            (
                "GET",
                _path(rf"/api/topics/{NAME}/{PARTITION}/messages"),
                self._api(lambda q, a: data.messages(a["name"], a["partition"], q.query)),
            ),
            ("POST", _path(rf"/api/topics/{NAME}/records"), self._api_produce),
            ("GET", _path(r"/api/groups"), self._api(lambda q, a: data.groups())),
            ("GET", _path(rf"/api/groups/{NAME}"), self._api(lambda q, a: data.group(a["name"]))),
        ]

    async def handle(self, request: Request) -> Response:
        response = await self._route(request)
        response.headers += SECURITY_HEADERS
        return response

    async def _route(self, request: Request) -> Response:
        path = request.path
        method = "GET" if request.method == "HEAD" else request.method
        if path == "/metrics":
            if self.settings.auth_metrics and not self._authorized(request):
                return _ask_secret()
            return Response(200, self.metrics(), CONTENT_TYPE_LATEST)
        if not self._authorized(request):
            return _ask_secret()
        refused = self._refuse_console(request)
        if refused is not None:
            return (
                _json(403, {"error": refused})
                if path.startswith("/api/")
                else plain_response(403, refused)
            )
        if path.startswith("/static/") and method == "GET":
            return self._static(path.removeprefix("/static/"))
        allowed = []
        for route_method, pattern, answer in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if route_method == method:
                return await answer(request, {k: unquote(v) for k, v in match.groupdict().items()})
            allowed.append(route_method)
        if allowed:
            return Response(
                405, b"method not allowed\n", "text/plain", [("allow", ", ".join(allowed))]
            )
        if path.startswith("/api/"):
            return _json(404, {"error": f"no such call: {path}"})
        return self._page_error(404, f"no page at {unquote(path)}")

    # ---------------------------------------------------------------- pages

    async def _cluster(self, request: Request, args: dict) -> Response:
        return await self._page(request, lambda: self.data.cluster(), pages.cluster_page)

    async def _topics(self, request: Request, args: dict) -> Response:
        return await self._page(request, self.data.topics, pages.topics_page)

    async def _topic(self, request: Request, args: dict) -> Response:
        name = args["name"]

        def render(node_id: int, partitions: list[dict]) -> str:
            return pages.topic_page(node_id, name, partitions, self.settings.allow_writes)

        return await self._page(request, lambda: self.data.topic(name), render)

    async def _messages(self, request: Request, args: dict) -> Response:
        """A page of records; a key search (the form on any partition's page) goes to the
        partition the key hashes to, unless `here` pins the one asked (records a producer
        put in a partition of its choice). /api/ searches the partition its path names."""
        name, partition = args["name"], args["partition"]
        key = request.query.get("key")
        if key and not request.query.get("here"):
            try:
                hashed = await self.data.key_partition(name, key)
            except QuorumLogError as exc:
                return self._page_error(_status_of(exc), str(exc))
            if str(hashed) != partition.strip():
                where = pages.messages_url(name, hashed, **request.query)
                return Response(303, b"", "text/plain", [("location", where)])
        return await self._page(
            request, lambda: self.data.messages(name, partition, request.query), pages.messages_page
        )

    async def _groups(self, request: Request, args: dict) -> Response:
        return await self._page(request, self.data.groups, pages.groups_page)

    async def _group(self, request: Request, args: dict) -> Response:
        async def group_and_dead_letters() -> tuple[dict, list[str]]:
            group = await self.data.group(args["name"])
            topics = await self.data.client.topics()
            dead = [f"{t}.dlq" for t in group["topics"] if f"{t}.dlq" in topics]
            return group, dead

        def render(node_id: int, found: tuple[dict, list[str]]) -> str:
            return pages.group_page(node_id, *found)

        return await self._page(request, group_and_dead_letters, render)

    async def _produce_form(self, request: Request, args: dict) -> Response:
        refused = self._refuse_write(request)
        if refused is not None:
            return self._page_error(403, refused)
        try:
            done = await self.data.produce(args["name"], request.form())
        except QuorumLogError as exc:
            return self._page_error(_status_of(exc), str(exc))
        where = pages.messages_url(done["topic"], done["partition"], offset=done["offset"])
        return Response(303, b"", "text/plain", [("location", where)])

    async def _page(self, request: Request, fetch, render) -> Response:
        try:
            found = await fetch()
        except QuorumLogError as exc:
            return self._page_error(_status_of(exc), str(exc))
        return Response(200, render(self.settings.node_id, found).encode())

    def _page_error(self, status: int, message: str) -> Response:
        html = pages.error_page(self.settings.node_id, status, message)
        return Response(status, html.encode())

    # ---------------------------------------------------------------- /api/

    def _api(self, fetch):
        async def answer(request: Request, args: dict) -> Response:
            try:
                return _json(200, await fetch(request, args))
            except QuorumLogError as exc:
                return _json(_status_of(exc), {"error": str(exc)})

        return answer

    async def _api_produce(self, request: Request, args: dict) -> Response:
        refused = self._refuse_write(request)
        if refused is not None:
            return _json(403, {"error": refused})
        try:
            fields = json.loads(request.body or b"{}")
            if not isinstance(fields, dict) or not isinstance(fields.get("value"), str):
                raise ValueError("a JSON object with a string value")
            form = {k: str(v) for k, v in fields.items() if v is not None}
        except ValueError as exc:
            return _json(400, {"error": f"the body is {exc}"})
        try:
            return _json(200, await self.data.produce(args["name"], form))
        except QuorumLogError as exc:
            return _json(_status_of(exc), {"error": str(exc)})

    # ---------------------------------------------------------------- plumbing

    def _authorized(self, request: Request) -> bool:
        secret = self.settings.secret
        if secret is None:
            return True
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            _, _, password = base64.b64decode(encoded, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(password, secret)

    def _refuse_console(self, request: Request) -> str | None:
        """Why the pages and /api/ are not served to this request, or None."""
        if self.settings.tls and self.settings.secret is None:
            # Its client shows the node's certificate: open to all, it would undo mutual TLS.
            return (
                "this node runs TLS without a cluster secret: its console would open the "
                "cluster to anyone who reaches it (set --secret-file); /metrics is served"
            )
        if self.settings.loopback and not is_loopback(_host_name(request)):
            # A site whose name was pointed at 127.0.0.1 (DNS rebinding) reads nothing here.
            return "this console listens on loopback: open it as localhost or 127.0.0.1"
        return None

    def _refuse_write(self, request: Request) -> str | None:
        if not self.settings.allow_writes:
            return "writes are off on this console (serve --http-allow-writes)"
        origin = request.headers.get("origin")
        host = request.headers.get("host", "")
        if origin is not None and origin.split("://", 1)[-1] != host:
            return f"a form from {origin} cannot write here"
        return None

    def _static(self, name: str) -> Response:
        body = self.static.get(name)
        if body is None:
            return plain_response(404, "not found")
        return Response(200, body, STATIC[name], [("cache-control", "max-age=300")])


def _host_name(request: Request) -> str:
    host = request.headers.get("host", "")
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rpartition(":")[0] if ":" in host else host


def _path(pattern: str) -> re.Pattern:
    return re.compile(pattern + "/?" if pattern != "/" else "/")


def _status_of(exc: QuorumLogError) -> int:
    if isinstance(exc, NotFound | UnknownTopicError):
        return 404
    if isinstance(exc, BadQuery | OffsetOutOfRangeError):
        return 400
    return 503  # the cluster did not answer, or refused


def _json(status: int, value: object) -> Response:
    return Response(status, json.dumps(value).encode(), JSON)


def _ask_secret() -> Response:
    return Response(
        401,
        b"this node asks for the cluster secret (any user name, the secret as password)\n",
        "text/plain; charset=utf-8",
        [("www-authenticate", 'Basic realm="quorumlog", charset="UTF-8"')],
    )
