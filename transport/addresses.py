"""Addresses as "host:port" text, the way the command line and the configuration write them."""

from __future__ import annotations

import ipaddress


def parse_address(text: str) -> tuple[str, int]:
    """Split "host:port" or "[v6]:port"."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"not a HOST:PORT address: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def format_address(sockaddr: tuple) -> str:
    host, port = sockaddr[0], sockaddr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere
