"""The load generator's HTTP/1.1 client: the response parser (``remote.httpparse``) on scripted
bytes cut every possible way, then real connections on 127.0.0.1 (keep-alive, a connection the
server closed while idle, kernel receive timestamps)."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.remote import httpconn, httpparse
from orchestrator.remote.httpconn import Client, HttpError, Response

HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
EVENTS = [b'data: {"a": 1}\n\n', b"data: [DONE]\n\n"]
CHUNKED = HEAD_CHUNKED + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"


def parse(*pieces: bytes, keep: int = 4096) -> tuple[Response, list[tuple[bytes, float]]]:
    """Feed ``pieces`` at times 1.0, 2.0, ...; the body pieces the sink got, with their times."""
    got: list[tuple[bytes, float]] = []
    response = Response(lambda piece, t: got.append((piece, t)), keep=keep)
    for i, piece in enumerate(pieces):
        response.feed(piece, float(i + 1))
    return response, got


def body(got: list[tuple[bytes, float]]) -> bytes:
    return b"".join(piece for piece, _ in got)


def test_a_chunked_stream_in_one_read():
    response, got = parse(CHUNKED)
    assert (response.status, response.complete, response.keep_alive) == (200, True, True)
    assert response.headers["content-type"] == "text/event-stream"
    assert got == [(EVENTS[0], 1.0), (EVENTS[1], 1.0)]


def test_one_read_per_chunk_takes_the_whole_chunk_path():
    first = CHUNKED.index(b"\r\n\r\n") + 4
    second = first + len(b"%x\r\n%s\r\n" % (len(EVENTS[0]), EVENTS[0]))
    response, got = parse(CHUNKED[:first], CHUNKED[first:second], CHUNKED[second:])
    assert got == [(EVENTS[0], 2.0), (EVENTS[1], 3.0)] and response.complete


def body_positions() -> list[int]:
    """Where each body byte of ``CHUNKED`` sits in it."""
    at, out = len(HEAD_CHUNKED), []
    for event in EVENTS:
        at += len(b"%x\r\n" % len(event))
        out.extend(range(at, at + len(event)))
        at += len(event) + 2
    return out


@pytest.mark.parametrize("cut", range(1, len(CHUNKED)))
def test_a_chunked_stream_cut_anywhere_gives_the_same_body(cut: int):
    response, got = parse(CHUNKED[:cut], CHUNKED[cut:])
    assert response.complete and response.status == 200
    assert body(got) == b"".join(EVENTS)
    # each body byte is stamped with the read it came in
    early = bytes(CHUNKED[at] for at in body_positions() if at < cut)
    assert b"".join(piece for piece, t in got if t == 1.0) == early


def test_every_byte_in_its_own_read():
    response, got = parse(*(CHUNKED[i : i + 1] for i in range(len(CHUNKED))))
    assert response.complete and body(got) == b"".join(EVENTS)
    # each body byte carries the time of its own read
    start = len(HEAD_CHUNKED) + len(b"%x\r\n" % len(EVENTS[0]))
    assert got[0] == (EVENTS[0][:1], float(start + 1))


@pytest.mark.parametrize(
    ("raw", "status", "text", "keep_alive"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, b"hello", True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, b"", True),
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b"", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, b"ok", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, b"ok", False),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
            200,
            b"ok",
            True,
        ),
        # an interim 100 Continue, then the answer
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
            200,
            b"x",
            True,
        ),
        # chunk extensions and trailers
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
            200,
            b"abc",
            True,
        ),
        # bytes after the response: the connection is out of step, never reused
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", 200, b"ok", False),
    ],
)
def test_sized_and_chunked_bodies(raw: bytes, status: int, text: bytes, keep_alive: bool):
    response, got = parse(raw)
    assert (response.status, response.complete, body(got), response.keep_alive) == (
        status,
        True,
        text,
        keep_alive,
    )


def test_a_close_delimited_body_ends_at_eof():
    response, got = parse(b"HTTP/1.1 200 OK\r\n\r\npart one ", b"part two")
    assert not response.complete and not response.keep_alive
    response.eof()
    assert response.complete and got == [(b"part one ", 1.0), (b"part two", 2.0)]


def test_an_error_status_keeps_its_text_and_never_reaches_the_sink():
    raw = b'HTTP/1.1 400 Bad Request\r\nContent-Length: 27\r\n\r\n{"error": "bad max_tokens"}'
    response, got = parse(raw, keep=10)
    assert (response.status, response.body, got, response.complete) == (
        400,
        b'{"error": ',
        [],
        True,
    )


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        ((b"SSH-2.0-OpenSSH\r\n\r\n",), "not an HTTP/1.x status line: 'SSH-2.0-OpenSSH'"),
        ((b"HTTP/1.1 OK\r\n\r\n",), "not an HTTP/1.x status line: 'HTTP/1.1 OK'"),
        ((HEAD_CHUNKED + b"zz\r\n",), "bad chunk size b'zz'"),
        ((HEAD_CHUNKED + b"-5\r\nabc\r\n",), "bad chunk size b'-5'"),
        ((HEAD_CHUNKED + b"0x3\r\nabc\r\n",), "bad chunk size b'0x3'"),
        ((HEAD_CHUNKED + b"+3\r\nabc\r\n",), "bad chunk size b'+3'"),
        ((HEAD_CHUNKED + b"1_0\r\n",), "bad chunk size b'1_0'"),
        (
            (HEAD_CHUNKED + b"3" * (httpparse.MAX_HEAD + 1),),
            "no end of a chunk's framing line in 65536 bytes",
        ),
        ((HEAD_CHUNKED + b"2\r\nabXY",), "a chunk does not end with CRLF"),
        ((b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",), "bad Content-Length 'x'"),
        ((b"x" * (httpparse.MAX_HEAD + 1),), "no end of the response head in 65536 bytes"),
    ],
)
def test_what_is_not_a_response_is_refused(pieces: tuple[bytes, ...], message: str):
    with pytest.raises(HttpError) as caught:
        parse(*pieces)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        ((), "the server closed the connection before a response"),
        ((b"HTTP/1.1 200 OK\r\n",), "the server closed the connection mid-response"),
        ((HEAD_CHUNKED + b"5\r\nab",), "the server closed the connection mid-response"),
    ],
)
def test_eof_before_the_end_is_an_error(pieces: tuple[bytes, ...], message: str):
    response, _ = parse(*pieces)
    with pytest.raises(HttpError) as caught:
        response.eof()
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("url", "head"),
    [
        ("http://127.0.0.1:8000", b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nA: b\r\n"),
        ("http://h/api/", b"POST /api/v1/x HTTP/1.1\r\nHost: h\r\nA: b\r\n"),
        ("https://[::1]:443/p", b"POST /p/v1/x HTTP/1.1\r\nHost: [::1]\r\nA: b\r\n"),
    ],
)
def test_request_heads(url: str, head: bytes):
    assert Client(url, {"A": "b"}).head("POST", "/v1/x", 12) == head + b"Content-Length: 12\r\n\r\n"


def test_only_http_urls():
    with pytest.raises(ValueError, match="not an http"):
        Client("ftp://h/", {})


# ------------------------------------------------------------------ over real connections


class Scripted:
    """A TCP server on 127.0.0.1 that answers each request with the next scripted reply.

    A reply is bytes, or a callable given the connection (to pause, or close, in between).
    ``close_after`` closes each connection after that many replies. Counts connections.
    """

    def __init__(
        self, replies: list, close_after: int | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.replies = list(replies)
        self.close_after = close_after
        self.tls = tls
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        served = 0
        if self.tls is not None:
            conn = self.tls.wrap_socket(conn, server_side=True)
        with conn:
            buffer = b""
            while self.replies:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                reply = self.replies.pop(0)
                if callable(reply):
                    reply(conn)
                else:
                    conn.sendall(reply)
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    return

    def close(self) -> None:
        self.sock.close()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.fixture
def scripted() -> Iterator[list[Scripted]]:
    servers: list[Scripted] = []
    yield servers
    for server in servers:
        server.close()


def fetch_all(port: int, count: int) -> list[tuple[int, str]]:
    async def main() -> list[tuple[int, str]]:
        client = Client(f"http://127.0.0.1:{port}", {})
        try:
            return [await client.fetch("POST", "/x", b"{}") for _ in range(count)]
        finally:
            client.close()

    return asyncio.run(main())


def test_keep_alive_reuses_one_connection(scripted):
    server = Scripted([OK, OK, OK])
    scripted.append(server)
    assert fetch_all(server.port, 3) == [(200, "ok")] * 3
    assert server.connections == 1


def test_a_connection_closed_while_idle_is_replaced(scripted):
    """The server drops each connection after one answer without saying so: the next request
    fails on the old connection before any byte of an answer, and is sent again on a new one."""
    server = Scripted([OK, OK, OK], close_after=1)
    scripted.append(server)
    assert fetch_all(server.port, 3) == [(200, "ok")] * 3
    assert server.connections == 3


def test_connection_close_is_honoured(scripted):
    close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    server = Scripted([close, close])
    scripted.append(server)
    assert fetch_all(server.port, 2) == [(200, "ok")] * 2
    assert server.connections == 2


def test_a_refused_connection_raises_the_os_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError, match="Connect call failed"):
        fetch_all(port, 1)


def test_each_address_is_tried_until_one_answers(scripted):
    """'localhost' may resolve to ::1 first while the server listens on 127.0.0.1 only."""
    server = Scripted([OK, OK])
    scripted.append(server)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = s.getsockname()[1]
    tried: list[int] = []

    async def main() -> list[tuple[int, str]]:
        loop = asyncio.get_running_loop()

        async def resolve(host: str, port: int, **kw: object) -> list:
            tried.append(port)
            stream = socket.SOCK_STREAM
            return [
                (socket.AF_INET, stream, 6, "", ("127.0.0.1", nobody)),
                (socket.AF_INET, stream, 6, "", ("127.0.0.1", server.port)),
            ]

        loop.getaddrinfo = resolve  # type: ignore[method-assign]
        client = Client("http://localhost:1", {})
        try:
            return [await client.fetch("GET", "/"), await client.fetch("GET", "/")]
        finally:
            client.close()

    assert asyncio.run(main()) == [(200, "ok"), (200, "ok")]
    assert tried == [1] and server.connections == 1  # resolved once; the good address kept


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for a certificate")
def test_https_goes_through_the_tls_transport(scripted, tmp_path: Path, monkeypatch):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    server = Scripted([CHUNKED, CHUNKED], tls=served)
    scripted.append(server)
    trusted = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(httpconn.ssl, "create_default_context", lambda: trusted)

    async def main() -> tuple[list[bytes], str]:
        client = Client(f"https://127.0.0.1:{server.port}", {})
        bodies = []
        for _ in range(2):
            got: list[tuple[bytes, float]] = []
            response = Response(lambda piece, t, got=got: got.append((piece, t)))
            await client.send("POST", "/x", b"{}", response)
            bodies.append(body(got))
        client.close()
        return bodies, client.arrival_clock

    assert asyncio.run(main()) == ([b"".join(EVENTS)] * 2, "loop")
    assert server.connections == 1


@pytest.mark.skipif(not httpconn.KERNEL_TIMESTAMPS, reason="kernel receive timestamps: Linux")
def test_chunk_times_are_when_the_bytes_arrived_not_when_they_were_read(scripted):
    """The server writes a chunk, then the client's event loop is blocked before it can read
    it: the chunk's time is still from before the block (the kernel's receive timestamp)."""
    asked, go, written = threading.Event(), threading.Event(), threading.Event()

    def stream(conn: socket.socket) -> None:
        asked.set()
        go.wait(10)
        conn.sendall(HEAD_CHUNKED + b"%x\r\n%s\r\n" % (len(EVENTS[0]), EVENTS[0]))
        written.set()
        conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(EVENTS[1]), EVENTS[1]))

    server = Scripted([stream])
    scripted.append(server)

    async def main() -> tuple[list[tuple[bytes, float]], float, str]:
        client = Client(f"http://127.0.0.1:{server.port}", {})
        got: list[tuple[bytes, float]] = []
        response = Response(lambda piece, t: got.append((piece, t)))
        request = asyncio.ensure_future(client.send("POST", "/x", b"{}", response))
        while not asked.is_set():  # the request is out
            await asyncio.sleep(0.001)
        go.set()  # from here the loop is blocked: nothing can be read until the await below
        written.wait(10)
        seen = time.perf_counter()  # the chunk is in the kernel by now
        time.sleep(0.2)
        await request
        client.close()
        return got, seen, client.arrival_clock

    got, seen, clock = asyncio.run(main())
    assert clock == "kernel"
    assert body(got) == b"".join(EVENTS)
    # stamped when it arrived (about when the server wrote it: loopback may hand it over a
    # little after the write returns), not when it was read, 0.2 s later
    assert got[0][1] < seen + 0.1


def test_the_event_loop_is_uvloop_only_when_installed():
    from orchestrator.remote.loadrunner import event_loop

    loop, name = event_loop()
    loop.close()
    assert name == ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
