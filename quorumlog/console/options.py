"""The HTTP listener's settings, as `serve` takes them (kept apart from the listener, which
`serve` imports only when it has one to open)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HttpOptions:
    listen: str
    allow_writes: bool = False  # the produce form and POST /api/topics/NAME/records
    auth_metrics: bool = False  # /metrics asks for the cluster secret too
