"""``http``: one request to an engine on this host's loopback, answered as data, never raised.

Engines bind 127.0.0.1 only, so the controller reaches them through the agent rather than an
SSH port forward. The caller decides what a 503 or a refused connection means (a server still
loading answers both), so HTTP errors and connection failures come back as values.
"""

from __future__ import annotations

import email.message
import json
import socket
import urllib.error
import urllib.request
from typing import IO, Any, Dict, Optional

from .protocol import AgentFailure, Emit, parse_spec
from .wire import ErrorKind, HttpResult, HttpSpec

METHODS = ("GET", "POST", "HEAD", "DELETE", "PUT")
MAX_BODY = 32 * 1024 * 1024


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect could leave loopback: hand the 3xx back instead of following it."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: email.message.Message,
        newurl: str,
    ) -> Optional[urllib.request.Request]:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))


def build_request(spec: HttpSpec) -> urllib.request.Request:
    method = spec.method.upper()
    path = spec.path
    if method not in METHODS:
        raise AgentFailure(
            ErrorKind.BAD_SPEC, f"http: method {method!r} is not one of {', '.join(METHODS)}"
        )
    if not 0 < spec.port < 65536:
        raise AgentFailure(ErrorKind.BAD_SPEC, f"http: port {spec.port} is outside 1-65535")
    if not path.startswith("/") or any(c in path for c in "\r\n "):
        raise AgentFailure(
            ErrorKind.BAD_SPEC, f"http: path {path!r} must start with '/' and hold no spaces"
        )
    body = spec.body
    data: Optional[bytes] = None
    headers = dict(spec.headers)
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode("utf-8")
        headers.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        data = body.encode("utf-8")
    elif body is not None:
        raise AgentFailure(ErrorKind.BAD_SPEC, "http: 'body' must be a string or a JSON object")
    url = "http://127.0.0.1:%d%s" % (spec.port, path)
    return urllib.request.Request(url, data=data, headers=headers, method=method)


def run(raw: Dict[str, Any], emit: Emit) -> HttpResult:
    spec = parse_spec(HttpSpec, raw)
    request = build_request(spec)
    try:
        with _OPENER.open(request, timeout=spec.timeout_s) as response:
            return _answer(response.status, response.headers, response.read(MAX_BODY))
    except urllib.error.HTTPError as exc:
        body = exc.read(MAX_BODY) if exc.fp is not None else b""
        return _answer(exc.code, exc.headers, body)
    except urllib.error.URLError as exc:
        return _failed(exc.reason)
    except (OSError, socket.timeout) as exc:
        return _failed(exc)


def _answer(status: int, headers: Any, body: bytes) -> HttpResult:
    return HttpResult(
        status=status,
        headers={k.lower(): v for k, v in (headers.items() if headers is not None else [])},
        body=body.decode("utf-8", errors="replace"),
        error=None,
    )


def _failed(reason: Any) -> HttpResult:
    if isinstance(reason, ConnectionRefusedError):
        text = "connection refused"
    elif isinstance(reason, (socket.timeout, TimeoutError)):
        text = "timed out"
    elif isinstance(reason, ConnectionResetError):
        text = "connection reset"
    else:
        text = str(reason)
    return HttpResult(status=None, headers={}, body="", error=text)
