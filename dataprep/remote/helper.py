"""A transfer helper process: object-store operations for a process where obstore cannot run.

obstore's runtime does not survive ``fork``: a child forked after its parent used it hangs
on its first request. Such a child (a DataLoader worker process) uses ``HelperTransport``
instead: each operation goes to a helper, a fresh interpreter started with
``python -m dataprep.remote`` (no fork), that runs it with ``ObstoreTransport`` and
streams the answer back over a pipe as pickled frames:

Each frame is an 8-byte little-endian length and a pickle:

    request  ("list", prefix) | ("head", name) | ("get", name, start, end, etag)
             | ("put", name, path-or-bytes, attributes) | ("attributes", name) | ("copy", source, destination)
             | ("delete", names)
    answer   ("ok", value) | ("meta", ObjectMeta, start, end) ("chunk", bytes)* ("end",)
             | ("error", kind, what, detail)

Helpers are started lazily, one per concurrent operation, and kept for the next; a helper
exits when its stdin closes, so it never outlives the process that started it. The
environment carries the credentials; nothing secret goes through the command line or pipe.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import dataprep
from dataprep.remote.config import RemoteConfig
from dataprep.remote.transport import ErrorKind, ObjectMeta, ObstoreTransport, RangeStream, TransportError
from dataprep.remote.url import StoreUrl, parse_url

__all__ = ["HelperTransport", "main"]

_SLACK_S = 5.0  # the helper's own time-outs fire first; this catches a helper that hangs or dies


class _Helper:
    """One helper process and its pipes."""

    def __init__(self, url: StoreUrl, config: RemoteConfig) -> None:
        root = str(Path(dataprep.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        argv = [sys.executable, "-m", "dataprep.remote", str(url), json.dumps(dataclasses.asdict(config))]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
                                     bufsize=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.wait_s = config.timeout_s + config.stall_s + _SLACK_S

    def send(self, request: tuple[Any, ...]) -> None:
        try:
            _write(self.stdin, request)
        except OSError as err:
            raise self._lost(f"could not take a request ({err.strerror})") from None

    def receive(self) -> tuple[Any, ...]:
        try:
            (size,) = struct.unpack("<Q", self._read_exact(8))
            frame = pickle.loads(self._read_exact(size))
        except (EOFError, pickle.UnpicklingError, OSError):
            raise self._lost("exited") from None
        if frame[0] == "error":
            raise TransportError(ErrorKind(frame[1]), frame[2], frame[3])
        return tuple(frame)

    def _read_exact(self, size: int) -> bytes:
        """``size`` bytes from the helper; waits at most ``wait_s`` for each piece (no silent hang)."""
        fd = self.stdout.fileno()
        parts: list[bytes] = []
        while size:
            ready, _, _ = select.select([fd], [], [], self.wait_s)
            if not ready:
                raise self._lost(f"answered nothing for {self.wait_s:.0f} s")
            part = os.read(fd, min(size, 1 << 20))
            if not part:
                raise EOFError
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    def _lost(self, what: str) -> TransportError:
        self.kill()
        return TransportError(ErrorKind.TRANSIENT, f"transfer helper (pid {self.proc.pid})", what)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.stdin, self.stdout):
            try:
                pipe.close()
            except OSError:
                pass

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class HelperTransport:
    """The ``ObstoreTransport`` interface, run in helper processes (module docstring)."""

    def __init__(self, url: StoreUrl, config: RemoteConfig) -> None:
        self.url = url
        self.config = config
        self._idle: list[_Helper] = []
        self._lock = threading.Lock()
        _LIVE.add(self)

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's helpers, closing only this copy of their pipes.

        Kept open, the copies would keep a helper's stdin open after its parent exits.
        """
        self._lock = threading.Lock()
        helpers, self._idle = self._idle, []
        for helper in helpers:
            for pipe in (helper.stdin, helper.stdout):
                try:
                    os.close(pipe.fileno())
                except (OSError, ValueError):
                    pass

    def _checkout(self) -> _Helper:
        with self._lock:
            while self._idle:
                helper = self._idle.pop()
                if helper.alive:
                    return helper
        return _Helper(self.url, self.config)

    def _checkin(self, helper: _Helper) -> None:
        with self._lock:
            self._idle.append(helper)

    def _call(self, request: tuple[Any, ...]) -> Any:
        helper = self._checkout()
        helper.send(request)
        frame = helper.receive()
        self._checkin(helper)
        return frame[1]

    def list(self, prefix: str) -> list[ObjectMeta]:
        return list(self._call(("list", prefix)))

    def head(self, name: str) -> ObjectMeta:
        meta: ObjectMeta = self._call(("head", name))
        return meta

    def put(self, name: str, source: Path | bytes, attributes: dict[str, str] | None = None) -> str | None:
        etag: str | None = self._call(("put", name, str(source) if isinstance(source, Path) else source, attributes))
        return etag

    def attributes(self, name: str) -> tuple[ObjectMeta, dict[str, str]]:
        answer: tuple[ObjectMeta, dict[str, str]] = self._call(("attributes", name))
        return answer

    def copy(self, source: str, destination: str) -> None:
        self._call(("copy", source, destination))

    def delete(self, names: Sequence[str]) -> None:
        self._call(("delete", list(names)))

    def open_range(self, name: str, start: int, end: int | None, etag: str | None) -> RangeStream:
        helper = self._checkout()
        helper.send(("get", name, start, end, etag))
        _, meta, first, last = helper.receive()
        return _HelperStream(self, helper, meta, first, last)

    def close(self) -> None:
        with self._lock:
            helpers, self._idle = self._idle, []
        for helper in helpers:
            helper.kill()


_LIVE: weakref.WeakSet[HelperTransport] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for transport in list(_LIVE):
        transport._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _HelperStream(RangeStream):
    """A GET's body read from a helper; closed early, the helper is killed (its pipe holds the rest)."""

    def __init__(self, owner: HelperTransport, helper: _Helper, meta: ObjectMeta, start: int, end: int) -> None:
        super().__init__(meta, start, end, iter(()))
        self._owner = owner
        self._helper: _Helper | None = helper

    def __iter__(self) -> Iterator[bytes | memoryview]:
        while self._helper is not None:
            frame = self._helper.receive()
            if frame[0] == "end":
                helper, self._helper = self._helper, None
                self._owner._checkin(helper)
                return
            yield frame[1]

    def close(self) -> None:
        if self._helper is not None:
            self._helper.kill()
            self._helper = None


def _serve(transport: ObstoreTransport, request: tuple[Any, ...], out: IO[bytes]) -> None:
    op = request[0]
    if op == "get":
        stream = transport.open_range(*request[1:])
        _write(out, ("meta", stream.meta, stream.start, stream.end))
        for chunk in stream:
            _write(out, ("chunk", bytes(chunk)))
        _write(out, ("end",))
        return
    if op == "list":
        value: Any = transport.list(request[1])
    elif op == "head":
        value = transport.head(request[1])
    elif op == "put":
        source = request[2]
        value = transport.put(request[1], Path(source) if isinstance(source, str) else source, request[3])
    elif op == "attributes":
        value = transport.attributes(request[1])
    elif op == "copy":
        transport.copy(request[1], request[2])
        value = None
    elif op == "delete":
        transport.delete(request[1])
        value = None
    else:
        raise TransportError(ErrorKind.FATAL, "helper", f"unknown request {op!r}")
    _write(out, ("ok", value))


def _write(out: IO[bytes], frame: tuple[Any, ...]) -> None:
    payload = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(payload)) + payload)
    while view:  # an unbuffered pipe may take part of a large frame per call
        view = view[out.write(view) or 0 :]
    out.flush()


def _read(stdin: IO[bytes]) -> tuple[Any, ...] | None:
    header = stdin.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    request: tuple[Any, ...] = pickle.loads(stdin.read(size))
    return request


def main(argv: Sequence[str] | None = None) -> int:
    """Serve requests from stdin until it closes (the entry point of ``python -m dataprep.remote``)."""
    url_text, config_json = argv if argv is not None else sys.argv[1:3]
    transport = ObstoreTransport(parse_url(url_text), RemoteConfig(**json.loads(config_json)))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (request := _read(stdin)) is not None:
        try:
            _serve(transport, request, stdout)
        except TransportError as err:
            _write(stdout, ("error", err.kind.value, err.what, err.detail))
    return 0

