"""The load generator's HTTP/1.1 client: keep-alive connections, streamed bodies, arrival times.

Why not aiohttp (which the load generator used before): profiling at 64-1024 streams put most of
the client's time in aiohttp's per-chunk path (protocol callback, stream reader, a waiter and a
task switch per SSE chunk), and the time a chunk was stamped with was when its task got to run,
so every stall of the event loop (a wave of requests ending and restarting in one tick) inflated
the latencies of every other stream. Here:

- a streamed body is parsed inside the read callback: no task switch per chunk;
- on Linux each read carries the kernel's receive timestamp (``SO_TIMESTAMPNS``: when the bytes
  reached the socket), so a late event loop delays the parsing but not the measurement; where
  the kernel gives none (another OS, ``https``), the time of the read is used
  (``arrival_clock``: ``kernel`` or ``loop``);
- standard library only: plain ``http`` reads the socket itself, ``https`` goes through
  asyncio's SSL transport.

It speaks what OpenAI-compatible servers answer (vLLM and SGLang run uvicorn): HTTP/1.1 with a
chunked, sized or close-delimited body (``httpparse``); no redirects, compression or proxies.
"""

from __future__ import annotations

import asyncio
import contextlib
import platform
import socket
import ssl
import struct
import sys
import time
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from .httpparse import HttpError, Response

__all__ = ["KERNEL_TIMESTAMPS", "Client", "HttpError", "Response"]

# one read's room: an SSE chunk is a few hundred bytes, and a smaller buffer costs less to
# allocate per read than asyncio's 256 KiB
READ_SIZE = 64 * 1024
# SO_TIMESTAMPNS is 35 on the architectures GPU hosts run (asm-generic and x86); Python's
# socket module does not name it. The cmsg is checked before use, so a mismatch costs nothing.
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_TIMESTAMP_ARCHES = ("x86_64", "amd64", "aarch64", "arm64", "ppc64le", "s390x", "riscv64")
KERNEL_TIMESTAMPS = sys.platform.startswith("linux") and platform.machine().lower() in (
    _TIMESTAMP_ARCHES
)
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if KERNEL_TIMESTAMPS else 0


class _Link:
    """One connection's exchange state, whichever transport carries the bytes."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.response: Optional[Response] = None
        self.waiter: Optional["asyncio.Future[None]"] = None
        self.closed = False
        self.reused = False

    def begin(self, response: Response) -> "asyncio.Future[None]":
        self.response, self.waiter = response, self.loop.create_future()
        return self.waiter

    def received(self, data: bytes, t: float) -> None:
        response = self.response
        if response is None:  # bytes nobody asked for: never reuse this connection
            self.close()
            return
        try:
            response.feed(data, t)
        except Exception as exc:  # noqa: BLE001 - a bad response (or sink) fails this request
            self._settle(exc)
            self.close()
            return
        if response.complete:
            self._settle(None)

    def lost(self, exc: Optional[BaseException]) -> None:
        """The connection ended (EOF or an error)."""
        response = self.response
        if response is not None and not response.complete:
            if exc is None:
                try:
                    response.eof()
                except HttpError as err:
                    exc = err
            self._settle(exc)
        self.close()

    def _settle(self, exc: Optional[BaseException]) -> None:
        waiter, self.response, self.waiter = self.waiter, None, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    async def send(self, data: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.closed = True


class _Shared:
    """What a client's plain connections share: one read buffer (a read is copied out at once,
    and one event loop runs them all), and counts of reads with and without a timestamp."""

    def __init__(self) -> None:
        self.buffer = bytearray(READ_SIZE)
        self.buffers = [self.buffer]
        self.view = memoryview(self.buffer)
        self.reads = [0, 0]  # reads, reads with a kernel timestamp


class _SocketLink(_Link):
    """Plain TCP read by this module: one ``recvmsg`` per readable event, kernel timestamps."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, shared: "_Shared"
    ) -> None:
        super().__init__(loop)
        self.shared = shared
        self.sock = sock
        self.fd = sock.fileno()
        loop.add_reader(self.fd, self._readable)

    @classmethod
    async def open(
        cls,
        loop: asyncio.AbstractEventLoop,
        family: int,
        addr: Tuple[object, ...],
        shared: "_Shared",
    ) -> "_SocketLink":
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if KERNEL_TIMESTAMPS:
                with contextlib.suppress(OSError):  # none: a read is stamped when it is read
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            await loop.sock_connect(sock, addr)
        except BaseException:
            sock.close()
            raise
        return cls(loop, sock, shared)

    def _readable(self) -> None:
        shared = self.shared
        try:
            size, ancillary, _, _ = self.sock.recvmsg_into(shared.buffers, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.lost(exc)
            return
        if not size:
            self.lost(None)
            return
        data = bytes(shared.view[:size])
        t = time.perf_counter()
        reads = shared.reads
        reads[0] += 1
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(raw)
                age = time.time() - (sec + nsec * 1e-9)
                # a read right after the arrival can be "before" it by the floats' rounding; a
                # clock step shows as nonsense, and then the read time stands
                if -0.001 < age < 60.0:
                    t -= max(0.0, age)
                    reads[1] += 1
        self.received(data, t)

    async def send(self, data: bytes) -> None:
        await self.loop.sock_sendall(self.sock, data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.fd)
            self.sock.close()


class _TransportLink(_Link, asyncio.Protocol):
    """Through an asyncio transport (TLS): stamped when the loop hands the bytes over."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.transport: Optional[asyncio.Transport] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received(data, time.perf_counter())

    def eof_received(self) -> Optional[bool]:
        self.lost(None)
        return False

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost(exc)

    async def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


class Client:
    """Requests to one server over a pool of keep-alive connections (one per request in flight).

    A request on a reused connection that fails before any byte of an answer (the server had
    closed it while idle) is sent once more on a new connection, as browsers and aiohttp do.
    """

    def __init__(self, base_url: str, headers: Dict[str, str]) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = self.port == (443 if self.tls else 80)
        lines = [f"Host: {host}" if default else f"Host: {host}:{self.port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._headers = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._idle: List[_Link] = []
        self._address: Optional[Tuple[int, Tuple[object, ...]]] = None
        self._tls: Optional[ssl.SSLContext] = None
        self._lookup: Optional["asyncio.Future[List[Any]]"] = None
        self._shared = _Shared()

    def head(self, method: str, path: str, length: int) -> bytes:
        """The request line and headers of one request with a body of ``length`` bytes."""
        return b"%s %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (
            method.encode("ascii"),
            (self.prefix + path).encode("utf-8"),
            self._headers,
            length,
        )

    async def send(self, method: str, path: str, body: bytes, response: Response) -> None:
        """Send one request and wait for its whole response (fed to ``response``).

        Raises what the connection raised (OSError, HttpError); cancelling (a timeout) closes
        the connection. ``response.sent``: when the request's last byte went to the kernel.
        """
        data = self.head(method, path, len(body)) + body
        while True:
            link = await self._link()
            settled = False
            try:
                waiter = link.begin(response)
                before = time.perf_counter()
                await link.send(data)
                response.sent = time.perf_counter()
                await waiter
                settled = True
                if response.first_t is not None and response.first_t < response.sent:
                    # the answer came before the send was seen to end (the loop ran others
                    # meanwhile): the last byte left between ``before`` and that answer, and
                    # ``before`` is the bound that never makes a TTFT shorter than it was
                    response.sent = before
            except (OSError, HttpError):
                if link.reused and not response.started:
                    response.sent = None
                    continue  # the server had closed this idle connection: a fresh one
                raise
            finally:
                if settled and response.keep_alive and not link.closed:
                    link.reused = True
                    self._idle.append(link)
                elif not settled or not response.keep_alive:
                    link.close()
            return

    async def fetch(self, method: str, path: str, body: bytes = b"") -> Tuple[int, str]:
        """A small request answered whole: (status, body text)."""
        parts: List[bytes] = []
        response = Response(lambda piece, _t: parts.append(piece), keep=1 << 20)
        await self.send(method, path, body, response)
        text = b"".join(parts) if response.status == 200 else response.body
        return response.status or 0, text.decode("utf-8", "replace")

    async def _link(self) -> _Link:
        while self._idle:
            link = self._idle.pop()
            if not link.closed:
                return link
        loop = asyncio.get_running_loop()
        if self.tls:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            _, protocol = await loop.create_connection(
                lambda: _TransportLink(loop), self.host, self.port, ssl=self._tls
            )
            return protocol
        if self._address is not None:
            family, addr = self._address
            return await _SocketLink.open(loop, family, addr, self._shared)
        # the first connections try each address in turn ("localhost" may give ::1 first to
        # a server that listens on 127.0.0.1 only); the one that answered serves the rest
        failure: Optional[OSError] = None
        for family, addr in await self._resolve():
            try:
                link = await _SocketLink.open(loop, family, addr, self._shared)
            except OSError as exc:
                failure = failure or exc
                continue
            self._address = (family, addr)
            return link
        raise failure or OSError(f"cannot resolve {self.host!r}")

    async def _resolve(self) -> List[Tuple[int, Tuple[object, ...]]]:
        """The host's addresses, looked up once for every connection of the first wave: an IP
        address at once, a name in asyncio's resolver threads (a few: one lookup per
        connection of a burst would queue behind them)."""
        if self._lookup is None:
            try:
                infos = socket.getaddrinfo(
                    self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
                )
            except socket.gaierror:
                loop = asyncio.get_running_loop()
                self._lookup = asyncio.ensure_future(
                    loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
                )
            else:
                self._lookup = asyncio.get_running_loop().create_future()
                self._lookup.set_result(infos)
        try:
            infos = await asyncio.shield(self._lookup)
        except OSError:
            self._lookup = None  # the next connection asks again
            raise
        return [(info[0], info[4]) for info in infos]

    @property
    def arrival_clock(self) -> str:
        """Where chunk times came from: ``kernel`` (every read), ``loop``, or ``mixed``."""
        total, stamped = self._shared.reads
        if self.tls or not stamped:
            return "loop"
        return "kernel" if stamped == total else "mixed"

    def close(self) -> None:
        for link in self._idle:
            link.close()
        self._idle.clear()
