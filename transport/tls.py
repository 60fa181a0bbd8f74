"""TLS contexts from PEM files: a CA, and a certificate with its private key.

Nodes serve TLS with mutual authentication: whoever connects, peer or client, shows a
certificate that the cluster's CA signed, and checks the node's against the same CA (its
name or IP address must be in the certificate, as for any TLS server). One CA signs the
nodes and the clients; the cluster secret, where one is set, is checked on top.
"""

from __future__ import annotations

import ssl


class TlsSetupError(ValueError):
    """A certificate, key or CA file that cannot be used (one line, for the user)."""


# A node that refuses a certificate (or its absence) closes the connection once TLS is up,
# often before its alert saying why reaches the dialler.
CLOSED_HINT = "does the node accept this certificate (--tls-cert)?"


def server_context(cert: str, key: str, ca: str) -> ssl.SSLContext:
    """A node's listener: its certificate, and the CA every connecting side must prove."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load(context, cert, key, ca)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def http_context(cert: str, key: str) -> ssl.SSLContext:
    """A node's HTTP listener (the console): its certificate, and no client certificate
    asked of browsers (the cluster secret guards it instead)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"cannot load TLS files ({cert}): {exc}") from None
    return context


def client_context(ca: str, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """Dialling a node (a client, or a node its peers): the CA to check it against, and the
    certificate to show it (a node's own; a client's, which nodes require)."""
    if (cert is None) != (key is None):
        raise TlsSetupError("a TLS certificate and its key go together: give both or neither")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    _load(context, cert, key, ca)
    return context


def _load(context: ssl.SSLContext, cert: str | None, key: str | None, ca: str) -> None:
    try:
        context.load_verify_locations(cafile=ca)
        if cert is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"cannot load TLS files ({cert or ca}): {exc}") from None


def tls_reason(exc: ssl.SSLError) -> str:
    """Why a TLS handshake failed, in a few words ("certificate verify failed: ...")."""
    verify = getattr(exc, "verify_message", None)
    reason = (exc.reason or str(exc)).lower().replace("_", " ")
    return f"{reason}: {verify}" if verify else reason
