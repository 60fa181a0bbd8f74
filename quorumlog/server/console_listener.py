"""`serve --http-listen`: the node's HTTP listener (console, `/api/`, `/metrics`), a task of
the node's own trio loop. The console reads the cluster through a client of its own,
connected to this node as any client would be (with the node's secret and certificate)."""

from __future__ import annotations

import trio

from quorumlog.actors.cluster.member import ClusterMember
from quorumlog.client.aclient import AsyncClient
from quorumlog.console.app import Console, ConsoleSettings
from quorumlog.console.data import ConsoleData
from quorumlog.console.http import serve_http
from quorumlog.console.options import HttpOptions
from quorumlog.server.metrics import metrics_exporter
from quorumlog.transport.addresses import is_loopback, parse_address
from quorumlog.transport.tls import http_context

CONSOLE_TIMEOUT_S = 5.0  # a page waits at most this long for the cluster


async def serve_console(
    node: ClusterMember,
    options: HttpOptions,
    node_listen: str,
    secret: bytes | None,
    tls: tuple[str, str, str] | None,
    *,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    cert, key, ca = tls if tls is not None else (None, None, None)
    client = AsyncClient(
        _dial_address(node, node_listen),
        secret=secret,
        timeout=CONSOLE_TIMEOUT_S,
        tls_ca=ca,
        tls_cert=cert,
        tls_key=key,
    )
    settings = ConsoleSettings(
        node.id,
        secret,
        options.allow_writes,
        options.auth_metrics,
        tls=tls is not None,
        loopback=is_loopback(parse_address(options.listen)[0]),
    )
    async with client:
        console = Console(settings, ConsoleData(client), metrics_exporter(node))
        context = http_context(cert, key) if cert is not None and key is not None else None
        await serve_http(options.listen, console.handle, context, task_status=task_status)


def _dial_address(node: ClusterMember, listen: str) -> str:
    """Where the console's client reaches this node: the address its peers know it by
    (a certificate names it), else where it listens (a wildcard: on loopback)."""
    known = node.address_of(node.id)
    if known is not None:
        return known
    host, port = parse_address(listen)
    return f"127.0.0.1:{port}" if host in ("", "0.0.0.0", "::") else listen
