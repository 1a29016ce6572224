"""A fault-injecting HTTP proxy for the S3 tests: it sits between the real client and the real server.

``FaultProxy(upstream)`` listens on 127.0.0.1 (a free port) and forwards every request to
the S3-compatible server at ``upstream`` (moto), keeping connections alive as S3 does.
``Fault`` rules, matched in order per request, break what a real network breaks:

- ``SLOWDOWN``  answer 503 SlowDown (S3's throttling reply) without forwarding
- ``RESET``     forward, then reset the connection (TCP RST) after ``after_bytes`` of the body
- ``TRUNCATE``  forward, then close the connection cleanly after ``after_bytes`` of the body
- ``FLIP``      forward, with the body byte at ``after_bytes`` inverted
- ``STALL``     forward, then send nothing after ``after_bytes`` until ``release_stalls()``

``bandwidth_bytes_s`` caps the response body rate of each connection, ``link_bytes_s`` the
rate of all of them together (a node's link: what a benchmark caps). Counters per object
key (the path after the bucket, no query) say what the server was asked and sent:
``requests(key, method)``, ``body_bytes(key)``, ``ranges(key)``; ``wait_for_bytes`` blocks
until a key's body bytes reach a mark (for a kill mid-download, without sleeping);
``log()`` is every request in the order it arrived (method, key, query).
"""

from __future__ import annotations

import enum
import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_CHUNK = 16 * 1024
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
_SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class FaultKind(enum.StrEnum):
    SLOWDOWN = "slowdown"
    RESET = "reset"
    TRUNCATE = "truncate"
    FLIP = "flip"
    STALL = "stall"


@dataclass
class Fault:
    """One rule: requests of ``method`` whose key contains ``key`` (is ``key``, with ``exact``) get ``kind``.

    ``times``: how many matching requests it breaks (None: all); ``fraction``: the chance
    that a matching request is broken (drawn from the proxy's seeded generator);
    ``query``: a substring the query must contain (e.g. ``"partNumber=2"``); ``exact``: the
    key must be ``key`` itself (a shard's rule then leaves its ``.idx`` sidecar alone).
    """

    kind: FaultKind
    method: str | None = "GET"
    key: str = ""
    times: int | None = 1
    fraction: float = 1.0
    after_bytes: int = 0
    query: str = ""
    exact: bool = False
    applied: int = field(default=0, init=False)

    def matches(self, method: str, key: str, query: str) -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.times is not None and self.applied >= self.times:
            return False
        return (key == self.key if self.exact else self.key in key) and self.query in query


class _Stats:
    """Per-key counters, guarded by one condition so tests can wait on them."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.body_bytes: Counter[str] = Counter()
        self.ranges: defaultdict[str, list[str]] = defaultdict(list)
        self.faults: Counter[FaultKind] = Counter()
        self.log: list[tuple[str, str, str]] = []

    def add_bytes(self, key: str, n: int) -> None:
        with self.cond:
            self.body_bytes[key] += n
            self.cond.notify_all()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up mid-body (what the faults provoke) is not an error here


class FaultProxy:
    """The proxy (module docstring). Start with ``start()`` or as a context manager."""

    def __init__(self, upstream: str, *, seed: int = 0, bandwidth_bytes_s: float | None = None,
                 link_bytes_s: float | None = None) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.bandwidth_bytes_s = bandwidth_bytes_s
        self.link_bytes_s = link_bytes_s
        self._link_free_s = 0.0  # when the shared link can send its next byte (monotonic clock)
        self.faults: list[Fault] = []
        self.stats = _Stats()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._unstall = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()

    # -- lifecycle --
    def start(self) -> FaultProxy:
        handler = type("Handler", (_Handler,), {"proxy": self})
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop as a server that goes away does: no new connections, and the open ones closed."""
        self._unstall.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            connections, self._connections = set(self._connections), set()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._lock:
            if alive:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() the proxy first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- faults --
    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def release_stalls(self) -> None:
        self._unstall.set()

    def pick(self, method: str, key: str, query: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, key, query) and self._rng.random() < fault.fraction:
                    fault.applied += 1
                    with self.stats.cond:
                        self.stats.faults[fault.kind] += 1
                    return fault
        return None

    # -- counters --
    def requests(self, key: str, method: str = "GET") -> int:
        with self.stats.cond:
            return self.stats.requests[(method, key)]

    def total_requests(self, method: str | None = None) -> int:
        with self.stats.cond:
            return sum(n for (m, _), n in self.stats.requests.items() if method in (None, m))

    def body_bytes(self, key: str) -> int:
        with self.stats.cond:
            return self.stats.body_bytes[key]

    def ranges(self, key: str) -> list[str]:
        with self.stats.cond:
            return list(self.stats.ranges[key])

    def log(self) -> list[tuple[str, str, str]]:
        """Every request so far, in arrival order: (method, key, query)."""
        with self.stats.cond:
            return list(self.stats.log)

    def faults_applied(self, kind: FaultKind) -> int:
        with self.stats.cond:
            return self.stats.faults[kind]

    def reset_counters(self) -> None:
        with self.stats.cond:
            self.stats.requests.clear()
            self.stats.body_bytes.clear()
            self.stats.ranges.clear()
            self.stats.faults.clear()
            self.stats.log.clear()

    def wait_for_bytes(self, key: str, nbytes: int, timeout_s: float = 60.0) -> bool:
        """Block until ``key``'s response body bytes reach ``nbytes`` (False if ``timeout_s`` passes first)."""
        with self.stats.cond:
            return self.stats.cond.wait_for(lambda: self.stats.body_bytes[key] >= nbytes, timeout_s)

    def stalled(self) -> threading.Event:
        return self._unstall

    def link_delay_s(self, nbytes: int) -> float:
        """Reserve ``nbytes`` on the shared link; how long the sender waits before they are sent."""
        rate = self.link_bytes_s
        if not rate:
            return 0.0
        with self._lock:
            now = time.monotonic()
            self._link_free_s = max(now, self._link_free_s) + nbytes / rate
            return self._link_free_s - now


class _Handler(BaseHTTPRequestHandler):
    proxy: FaultProxy
    protocol_version = "HTTP/1.1"
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def setup(self) -> None:
        super().setup()
        self.proxy.track(self.connection, True)

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        segments = parts.path.lstrip("/").split("/", 1)
        key = segments[1] if len(segments) > 1 else ""
        body = self._read_body()
        stats = self.proxy.stats
        with stats.cond:
            stats.requests[(self.command, key)] += 1
            stats.log.append((self.command, key, parts.query))
            if self.headers.get("Range"):
                stats.ranges[key].append(self.headers["Range"])
        fault = self.proxy.pick(self.command, key, parts.query)
        if fault is not None and fault.kind is FaultKind.SLOWDOWN:
            self._reply(503, _SLOWDOWN_BODY, {"Content-Type": "application/xml"})
            return
        status, reason, headers, payload = self._forward(body)
        self._send(key, status, reason, headers, payload, fault)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _dispatch

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
                if size == 0:
                    return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], http.client.HTTPResponse]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        for attempt in range(2):  # a pooled upstream connection the server closed: reconnect once
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(self.proxy.upstream_host, self.proxy.upstream_port)
            try:
                self._upstream.request(self.command, self.path, body=body, headers=headers)
                response = self._upstream.getresponse()
                break
            except (http.client.HTTPException, OSError):
                self._upstream.close()
                self._upstream = None
                if attempt:
                    raise
        kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
        return response.status, response.reason, kept, response

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send(self, key: str, status: int, reason: str, headers: list[tuple[str, str]],
              response: http.client.HTTPResponse, fault: Fault | None) -> None:
        payload = response.read() if self.command != "HEAD" else b""
        if not any(k.lower() == "content-length" for k, _ in headers):
            headers.append(("Content-Length", str(len(payload))))
        self.send_response(status, reason)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if fault is not None and fault.kind is FaultKind.FLIP and fault.after_bytes < len(payload):
            flipped = bytearray(payload)
            flipped[fault.after_bytes] ^= 0xFF
            payload = bytes(flipped)
        cut = fault.after_bytes if fault is not None and fault.kind in _CUTS else None
        self._stream(key, payload if cut is None else payload[:cut])
        if fault is not None and cut is not None and cut < len(payload):
            self._break(fault)

    def _stream(self, key: str, payload: bytes) -> None:
        rate = self.proxy.bandwidth_bytes_s
        start = time.monotonic()
        sent = 0
        for offset in range(0, len(payload), _CHUNK):
            chunk = payload[offset : offset + _CHUNK]
            wait = self.proxy.link_delay_s(len(chunk))
            if wait > 0:
                time.sleep(wait)
            self.wfile.write(chunk)
            self.wfile.flush()
            sent += len(chunk)
            self.proxy.stats.add_bytes(key, len(chunk))
            if rate:
                ahead = sent / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)

    def _break(self, fault: Fault) -> None:
        if fault.kind is FaultKind.STALL:
            self.proxy.stalled().wait()
        if fault.kind is FaultKind.RESET:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR) if fault.kind is not FaultKind.RESET else None
        except OSError:
            pass
        self.connection.close()

    def finish(self) -> None:
        self.proxy.track(self.connection, False)
        try:
            super().finish()
        except OSError:
            pass
        if self._upstream is not None:
            self._upstream.close()


_CUTS = {FaultKind.RESET, FaultKind.TRUNCATE, FaultKind.STALL}
