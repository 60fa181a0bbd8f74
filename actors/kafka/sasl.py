"""SASL/PLAIN on the Kafka listener, over the cluster's secret.

With `--secret-file`, a Kafka connection must authenticate before anything but
ApiVersions: SaslHandshake (v1, mechanism PLAIN), then SaslAuthenticate with any user
name and the cluster secret as the password (`sasl.username`/`sasl.password` in the
clients). Anything else first, or a wrong secret, closes the connection (as Kafka does),
after the failed SaslAuthenticate is answered with SASL_AUTHENTICATION_FAILED. PLAIN sends
the secret as it is: on a network others can read, put the listener behind TLS.
"""

from __future__ import annotations

import hmac

from kio.schema.errors import ErrorCode as K

MECHANISM = "PLAIN"
API_VERSIONS, HANDSHAKE, AUTHENTICATE = 18, 17, 36


class SaslRefused(Exception):
    """The connection must close: it skipped authentication, or failed it."""


class SaslSession:
    """One connection's authentication; with no secret, everything is allowed."""

    def __init__(self, secret: bytes | None):
        self._secret = secret
        self.authenticated = secret is None
        self._mechanism_chosen = False
        self._failed = False

    def check(self, api_key: int) -> None:
        """Raises SaslRefused for a request not allowed now (one try per connection)."""
        if self._failed:
            raise SaslRefused("SASL authentication failed")
        if self.authenticated or api_key in (API_VERSIONS, HANDSHAKE, AUTHENTICATE):
            return
        raise SaslRefused(f"api {api_key} before SASL authentication")

    async def handshake(self, request, version: int) -> dict:
        self._mechanism_chosen = request.mechanism == MECHANISM
        error = K.none if self._mechanism_chosen else K.unsupported_sasl_mechanism
        return {"error_code": error, "mechanisms": [MECHANISM]}

    async def authenticate(self, request, version: int) -> dict:
        if not self._mechanism_chosen:
            return {"error_code": K.illegal_sasl_state, "error_message": "handshake first"}
        if self._secret is None:  # an open listener takes any credentials
            return {"auth_bytes": b""}
        # PLAIN's message: authorization id, user name and password, NUL-separated.
        parts = bytes(request.auth_bytes).split(b"\0")
        password = parts[2] if len(parts) == 3 else b""
        if not hmac.compare_digest(password, self._secret):
            self._failed = True
            return {
                "error_code": K.sasl_authentication_failed,
                "error_message": "authentication failed: the password is the cluster secret",
            }
        self.authenticated = True
        return {"auth_bytes": b""}
