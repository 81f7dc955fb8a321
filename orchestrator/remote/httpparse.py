"""One HTTP/1.1 response parsed as its bytes arrive, for the load generator's client.

Pure (the caller gives each read's bytes and arrival time), so the framing (chunked, sized,
close-delimited; interim 1xx answers; trailers) is pinned by tests on bytes cut every possible
way, while ``httpconn`` does the I/O. The common read of a stream, one whole chunk holding one
SSE event, takes a short path: that is most of what a load generator reads.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Optional

Sink = Callable[[bytes, float], None]

MAX_HEAD = 64 * 1024  # a status line and headers longer than this are not an HTTP server's
_HEX = re.compile(
    rb"[0-9A-Fa-f]{1,15}\Z"
)  # a chunk size: int(x, 16) alone takes "0x1", "+1", "1_0"
_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class HttpError(Exception):
    """The server's bytes are not an HTTP/1.1 response, or the response was cut off."""


class Response:
    """One HTTP/1.1 response parsed as its bytes arrive (pure: the caller gives arrival times).

    The body of a 200 goes to ``sink`` piece by piece with the arrival time of its bytes; any
    other status keeps its first ``keep`` bytes in ``body`` (an error text). ``sent``,
    ``first_t``, ``last_t``: when the request was sent and when the first and the last bytes
    came (``perf_counter`` s).
    """

    def __init__(self, sink: Sink, keep: int = 4096) -> None:
        self.sink = sink
        self.keep = keep
        self.status: Optional[int] = None
        self.headers: Dict[str, str] = {}
        self.body = b""
        self.keep_alive = True
        self.started = False  # any byte received
        self.sent: Optional[float] = None
        self.first_t: Optional[float] = None
        self.last_t: Optional[float] = None
        self._state = _HEAD
        self._left = 0
        self._buffer = b""

    def feed(self, data: bytes, t: float) -> None:
        """Bytes that arrived at ``t``; HttpError when they cannot be a response."""
        if not self.started:
            self.started, self.first_t = True, t
        self.last_t = t
        if self._buffer:
            data, self._buffer = self._buffer + data, b""
        elif self._state == _SIZE and self._whole_chunk(data, t):
            return
        pos, end = 0, len(data)
        while pos < end and self._state != _DONE:
            pos = self._step(data, pos, t)
            if pos < 0:  # incomplete framing: wait for more bytes
                pos = -pos - 1
                self._buffer = data[pos:]
                if self._state == _HEAD and len(self._buffer) > MAX_HEAD:
                    raise HttpError(f"no end of the response head in {MAX_HEAD} bytes")
                if self._state in (_SIZE, _TRAILER) and len(self._buffer) > MAX_HEAD:
                    raise HttpError(f"no end of a chunk's framing line in {MAX_HEAD} bytes")
                return
        if pos < end:  # bytes after the response: the connection is out of step
            self.keep_alive = False

    def _whole_chunk(self, data: bytes, t: float) -> bool:
        """The common read of a stream, exactly one whole chunk, taken in one go (else False:
        the general walk reads it)."""
        eol = data.find(b"\r\n")
        if eol <= 0 or eol > 8:
            return False
        if not _HEX.match(data[:eol]):
            return False
        size = int(data[:eol], 16)
        stop = eol + 2 + size
        if size <= 0 or len(data) != stop + 2 or not data.endswith(b"\r\n"):
            return False
        self._body(data[eol + 2 : stop], t)
        return True

    def _step(self, data: bytes, pos: int, t: float) -> int:
        """Consume one framing element at ``pos``; the next position, or -(pos+1) to wait."""
        state = self._state
        if state in (_DATA, _LENGTH):
            take = min(self._left, len(data) - pos)
            self._body(data if take == len(data) else data[pos : pos + take], t)
            self._left -= take
            if not self._left:
                self._state = _DATA_END if state == _DATA else _DONE
            return pos + take
        if state == _SIZE:
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                return -pos - 1
            digits = data[pos:eol].split(b";", 1)[0].strip(b" \t")
            size = int(digits, 16) if _HEX.match(digits) else -1
            if size < 0:
                raise HttpError(f"bad chunk size {data[pos:eol][:40]!r}")
            self._left, self._state = size, (_DATA if size else _TRAILER)
            return eol + 2
        if state == _DATA_END:
            if len(data) - pos < 2:
                return -pos - 1
            if data[pos : pos + 2] != b"\r\n":
                raise HttpError("a chunk does not end with CRLF")
            self._state = _SIZE
            return pos + 2
        if state == _TRAILER:
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                return -pos - 1
            if eol == pos:
                self._state = _DONE
            return eol + 2
        if state == _UNTIL_CLOSE:
            self._body(data[pos:] if pos else data, t)
            return len(data)
        eoh = data.find(b"\r\n\r\n", pos)
        if eoh < 0:
            return -pos - 1
        self._head(data[pos:eoh])
        return eoh + 4

    def _body(self, piece: bytes, t: float) -> None:
        if self.status == 200:
            self.sink(piece, t)
        elif len(self.body) < self.keep:
            self.body += piece[: self.keep - len(self.body)]

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HttpError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(parts[1])
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:  # an interim answer: the real head follows
            return
        self.status, self.headers = status, headers
        connection = headers.get("connection", "").lower()
        self.keep_alive = (
            "keep-alive" in connection if parts[0] == "HTTP/1.0" else "close" not in connection
        )
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _SIZE
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise HttpError(f"bad Content-Length {headers['content-length']!r}") from None
            self._state = _LENGTH if self._left > 0 else _DONE
        elif status in (204, 304):
            self._state = _DONE
        else:
            self._state, self.keep_alive = _UNTIL_CLOSE, False

    def eof(self) -> None:
        """The server closed the connection: the end of a close-delimited body, else an error."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
        if self._state != _DONE:
            where = "before a response" if not self.started else "mid-response"
            raise HttpError(f"the server closed the connection {where}")
        self.keep_alive = False

    @property
    def complete(self) -> bool:
        return self._state == _DONE
