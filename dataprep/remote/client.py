"""``RemoteStore``: list, head, ranged reads as a stream, put and delete under one URL, with retries.

One client per dataset or output URL. It creates its transport lazily in each process
and never carries it across a fork or a pickle: after ``fork`` (a DataLoader worker) or
in a process that inherited obstore from its parent, requests run in a helper process
(``dataprep.remote.helper``), since obstore's runtime hangs in a forked child. Names are
``/``-separated and relative to the URL. Failures raise ``RemoteError`` subclasses that
name the URL; nothing secret appears in them or in the log (logger ``dataprep.remote``).
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from dataprep.remote.config import RemoteConfig, TransportMode
from dataprep.remote.errors import RemoteNotFoundError
from dataprep.remote.helper import HelperTransport
from dataprep.remote.retry import Retrier, RetryCounter
from dataprep.remote.transport import (
    ErrorKind,
    ObjectMeta,
    ObstoreTransport,
    RangeStream,
    TransportError,
    import_obstore,
)
from dataprep.remote.url import StoreUrl, parse_url

__all__ = ["RemoteStore", "inline_transport_safe"]

T = TypeVar("T")
_obstore_pid: int | None = None  # the process that imported obstore through this module
_import_lock = threading.Lock()


class Transport(Protocol):
    def list(self, prefix: str) -> list[ObjectMeta]: ...
    def head(self, name: str) -> ObjectMeta: ...
    def open_range(self, name: str, start: int, end: int | None, etag: str | None) -> RangeStream: ...
    def put(self, name: str, source: Path | bytes, attributes: dict[str, str] | None = None) -> str | None: ...
    def attributes(self, name: str) -> tuple[ObjectMeta, dict[str, str]]: ...
    def copy(self, source: str, destination: str) -> None: ...
    def delete(self, names: Sequence[str]) -> None: ...
    def close(self) -> None: ...


def inline_transport_safe() -> bool:
    """True where obstore may run in this process: this module imported it here (not in a parent before a fork)."""
    global _obstore_pid
    with _import_lock:
        if _obstore_pid is None and "obstore" not in sys.modules:
            import_obstore()
            _obstore_pid = os.getpid()
        return _obstore_pid == os.getpid()


class RemoteStore:
    """Objects under one URL (module docstring). Cheap to build: nothing connects before the first request."""

    def __init__(self, url: str | os.PathLike[str] | StoreUrl, config: RemoteConfig | None = None) -> None:
        self.url: StoreUrl = parse_url(url)
        self.config = config if config is not None else RemoteConfig()
        self.retries = RetryCounter()
        self._transport: Transport | None = None
        self._pid = -1
        self._lock = threading.Lock()
        _LIVE.add(self)

    def describe(self) -> str:
        return str(self.url)

    def url_of(self, name: str) -> str:
        return str(self.url.child(name))

    # -- operations --
    def list(self, prefix: str = "") -> list[ObjectMeta]:
        """Every object under the URL (and ``prefix``), names relative to the URL, in name order."""
        found = self._retry("list", self.url_of(prefix), lambda t: t.list(prefix))
        return sorted(found, key=lambda m: m.name)

    def head(self, name: str) -> ObjectMeta:
        return self._retry("head", self.url_of(name), lambda t: t.head(name))

    def exists(self, name: str) -> bool:
        try:
            self.head(name)
        except RemoteNotFoundError:
            return False
        return True

    def read_bytes(self, name: str) -> bytes:
        return b"".join(bytes(chunk) for chunk in self.iter_range(name))

    def put(self, name: str, source: Path | bytes, *, attributes: dict[str, str] | None = None) -> str | None:
        """Store a local file or bytes as ``name`` atomically (readers see the old object or all of it); its ETag.

        ``attributes``: user metadata kept with the object (``attributes`` reads it back).
        """
        return self._retry("put", self.url_of(name), lambda t: t.put(name, source, attributes))

    def attributes(self, name: str) -> tuple[ObjectMeta, dict[str, str]]:
        """``name``'s metadata and the attributes it was stored with."""
        return self._retry("head", self.url_of(name), lambda t: t.attributes(name))

    def copy(self, source: str, destination: str) -> None:
        """Copy ``source`` to ``destination`` in the store, server side (no bytes through this machine)."""
        self._retry("copy", self.url_of(source), lambda t: t.copy(source, destination))

    def delete(self, names: Sequence[str]) -> None:
        """Delete objects; a missing one is not an error."""
        if names:
            self._retry("delete", self.url_of(names[0]), lambda t: t.delete(names))

    def iter_range(self, name: str, start: int = 0, end: int | None = None, *,
                   etag: str | None = None,
                   on_meta: Callable[[ObjectMeta], None] | None = None) -> Iterator[bytes | memoryview]:
        """Bytes ``[start, end)`` of ``name`` as chunks (``end`` None: to the object's end).

        A body cut short (reset, truncated, stalled for ``stall_s``) is read again from the
        byte reached, pinned to the ETag first seen (``etag``, or the first response's), so
        the chunks are always one version: a replaced object raises ``RemoteChangedError``.
        ``on_meta``, when given, is called with the object's ``ObjectMeta`` at the first response.
        """
        url = self.url_of(name)
        retrier = Retrier(self.config, url, "get", self.retries)
        position = start
        while end is None or position < end:
            try:
                stream = self._transport_here().open_range(name, position, end, etag)
            except TransportError as err:
                retrier.failed(err)
                continue
            try:
                if etag is None:
                    etag = stream.meta.etag
                    if on_meta is not None:
                        on_meta(stream.meta)
                end = stream.meta.size if end is None else end
                for chunk in stream:
                    position += len(chunk)
                    retrier.progressed()
                    yield chunk
                if position < end:
                    cut = f"the body ended at byte {position} of {end}"
                    raise TransportError(ErrorKind.TRANSIENT, f"get {url}", cut)
            except TransportError as err:
                retrier.failed(err)
            finally:
                stream.close()

    # -- lifecycle --
    def close(self) -> None:
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None and self._pid == os.getpid():
            transport.close()

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "config": self.config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["config"])  # type: ignore[misc]  # __setstate__ rebuilds

    def __repr__(self) -> str:
        return f"RemoteStore({str(self.url)!r})"

    # -- internals --
    def _transport_here(self) -> Transport:
        pid = os.getpid()
        with self._lock:
            if self._transport is None or self._pid != pid:
                self._transport, self._pid = self._new_transport(), pid  # never the parent's across a fork
            return self._transport

    def _new_transport(self) -> Transport:
        mode = self.config.transport
        if mode is TransportMode.INLINE or (mode is TransportMode.AUTO and inline_transport_safe()):
            return ObstoreTransport(self.url, self.config)
        return HelperTransport(self.url, self.config)

    def _retry(self, what: str, url: str, op: Callable[[Transport], T]) -> T:
        retrier = Retrier(self.config, url, what, self.retries)
        while True:
            try:
                return op(self._transport_here())
            except TransportError as err:
                retrier.failed(err)


_LIVE: weakref.WeakSet[RemoteStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A thread of the parent may have held a lock at the fork: the child's copies start unlocked."""
    global _import_lock
    _import_lock = threading.Lock()
    for store in list(_LIVE):
        store._lock = threading.Lock()
        store.retries = RetryCounter()


os.register_at_fork(after_in_child=_after_fork_in_child)
