"""What a failed request says, in words, for the one line that stops a run: what kind of failure a transport error
is, why a connection could not be made, what a refused request was told, and the endpoint as it may be shown
(without a password, never with a key). No Python class name reaches a message."""

from __future__ import annotations

import socket

import aiohttp
from yarl import URL

from healthbench.api.retrying import Failure, Kind
from healthbench.errors import ProviderError

# What aiohttp raises for a URL it cannot send to (a scheme other than http and https has its own error from 3.10).
BAD_URL = tuple(getattr(aiohttp, name) for name in ("InvalidURL", "NonHttpUrlClientError") if hasattr(aiohttp, name))
# What it raises when no connection is made within the connect timeout (its own class from 3.10).
_CONNECT_TIMEOUT = tuple(getattr(aiohttp, name) for name in ("ConnectionTimeoutError",) if hasattr(aiohttp, name))
# What a transport failure can be: aiohttp's errors, and a timeout (a plain TimeoutError past the total).
TRANSPORT = (aiohttp.ClientError, TimeoutError)


# What a resolver answers for a name that does not exist (as opposed to one it could not look up just now).
_NO_SUCH_NAME = frozenset({socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)})


def no_such_host(exc: aiohttp.ClientConnectorError) -> bool:
    """Whether the endpoint's host name does not exist, as its resolver says for certain."""
    return isinstance(exc.os_error, socket.gaierror) and exc.os_error.errno in _NO_SUCH_NAME


def unreachable(exc: aiohttp.ClientConnectorError) -> str:
    """Why a connection could not be made, in words: refused, no such host, a failed TLS handshake."""
    error = exc.os_error
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"its TLS certificate is not trusted: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return f"the TLS handshake failed ({error}); is it http:// rather than https://?"
    if no_such_host(exc):
        return f"no such host: {exc.host}"
    if isinstance(error, socket.gaierror):
        return f"the name {exc.host} could not be resolved: {error.strerror or error}"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused at {exc.host}:{exc.port}"
    return f"cannot connect to {exc.host}:{exc.port}: {error.strerror or error}"


def transport_failure(
    exc: aiohttp.ClientError | TimeoutError, timeout: float, connect: float, endpoint: str
) -> Failure:
    """A transport error as a failure of its kind, in words: an attempt gets no answer within `timeout` seconds,
    and no connection within `connect`, from `endpoint` (as it may be shown)."""
    if isinstance(exc, BAD_URL):
        return Failure(Kind.NOT_A_URL, "is not a URL (it needs http:// or https://, then a host)")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Failure(Kind.NO_SUCH_HOST if no_such_host(exc) else Kind.UNREACHABLE, unreachable(exc))
    if isinstance(exc, _CONNECT_TIMEOUT):
        return Failure(Kind.UNREACHABLE, f"no connection within {connect:g} s")
    if isinstance(exc, TimeoutError):
        return Failure(Kind.NO_ANSWER, f"no answer within {timeout:g} s", where=f" from {endpoint}")
    detail = " ".join(str(exc).split())
    cause = "the connection closed before the answer was complete" + (f": {detail}" if detail else "")
    return Failure(Kind.DROPPED, cause)


def said(status: int | None, error: ProviderError | None, cause: str) -> str:
    """What a refusal said in one line: its status, the provider's code and message (else `cause`)."""
    code = f" {error.code}" if error is not None and error.code else ""
    message = error.message if error is not None and error.message else cause
    message = message if len(message) <= 300 else message[:297] + "..."
    return f"HTTP {status}{code}: {message}"


def shown(url: str) -> str:
    """A URL as it may be shown: without a user or password."""
    try:
        parsed = URL(url)
    except ValueError:
        return url
    return str(parsed.with_user(None)) if parsed.user or parsed.password else url
