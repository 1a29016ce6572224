"""The one module that talks to obstore: a store built from the usual places, single operations, error kinds.

``ObstoreTransport(url, config)`` builds obstore's S3, GCS, Azure or local store for a
``StoreUrl`` (credentials and endpoint from the environment: ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``; an
AWS profile (``AWS_PROFILE``, ``~/.aws``) through boto3 when no key is in the environment;
else the instance role). An ``http://`` endpoint (a local S3-compatible server) is used
with path-style addressing and plain HTTP allowed for it. Every operation is one
request (obstore retries it inside, ``RemoteConfig.request_retries``); failures become a
``TransportError`` whose ``kind`` says what the client should do and whose message is
scrubbed of secrets. obstore is not fork-safe: see ``dataprep.remote.client``.
"""

from __future__ import annotations

import contextlib
import enum
import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dataprep.remote.config import RemoteConfig
from dataprep.remote.errors import RemoteConfigError
from dataprep.remote.scrub import register_secret, scrub
from dataprep.remote.url import Scheme, StoreUrl

if TYPE_CHECKING:
    from obstore.store import BackoffConfig, ClientConfig, RetryConfig

__all__ = ["ErrorKind", "ObjectMeta", "ObstoreTransport", "RangeStream", "TransportError", "import_obstore"]

_ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
_REQUEST_TIMEOUT = timedelta(hours=1)  # a backstop only: stalls are caught by the read time-out


class ErrorKind(enum.StrEnum):
    """What a failed operation means for the caller."""

    NOT_FOUND = "not_found"  # the object or the bucket does not exist
    ACCESS = "access"  # credentials missing or refused
    CHANGED = "changed"  # a conditional read found another version
    TRANSIENT = "transient"  # worth retrying: 5xx, resets, time-outs, truncated bodies
    FATAL = "fatal"  # a bad request that a retry cannot fix


class TransportError(Exception):
    """One failed operation: ``kind`` (ErrorKind), ``what`` (``get s3://...``), ``detail`` (no secrets in it)."""

    def __init__(self, kind: ErrorKind, what: str, detail: str) -> None:
        super().__init__(f"{what}: {detail}")
        self.kind = kind
        self.what = what
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.kind, self.what, self.detail)


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """An object as the store lists it: ``name`` relative to the URL's prefix, ``size`` in bytes."""

    name: str
    size: int
    etag: str | None
    mtime_s: float


class RangeStream:
    """The body of one ranged GET: ``meta`` (the whole object), bytes ``[start, end)`` as chunks."""

    def __init__(self, meta: ObjectMeta, start: int, end: int, chunks: Iterator[bytes | memoryview]) -> None:
        self.meta = meta
        self.start = start
        self.end = end
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes | memoryview]:
        return self._chunks

    def close(self) -> None:
        """Drop the body (the connection is not reused for its rest)."""
        self._chunks = iter(())


def import_obstore() -> Any:
    """The obstore module, or RemoteConfigError saying how to install it."""
    try:
        import obstore
    except ImportError as err:
        raise RemoteConfigError("object storage needs obstore: pip install 'shardfeed[remote]'") from err
    return obstore


class ObstoreTransport:
    """Single object-store operations through obstore (module docstring). Not fork-safe."""

    def __init__(self, url: StoreUrl, config: RemoteConfig) -> None:
        self.url = url
        self.config = config
        self._obs = import_obstore()
        self._built: Any = None

    @property
    def _store(self) -> Any:
        if self._built is None:
            if self.url.is_local and not os.path.isdir(self.url.prefix):
                raise TransportError(ErrorKind.NOT_FOUND, f"open {self.url}", "no such folder")
            self._built = _build_store(self.url, self.config)
        return self._built

    def list(self, prefix: str) -> list[ObjectMeta]:
        try:
            pages = self._obs.list(self._store, prefix=prefix or None).collect()
        except Exception as err:  # noqa: BLE001 - obstore raises builtins and its own tree; classified here
            raise translate(err, f"list {self.url}/{prefix}") from None
        return [_meta(m) for m in pages]

    def head(self, name: str) -> ObjectMeta:
        try:
            return _meta(self._obs.head(self._store, name))
        except Exception as err:  # noqa: BLE001
            raise translate(err, f"head {self.url.child(name)}") from None

    def open_range(self, name: str, start: int, end: int | None, etag: str | None) -> RangeStream:
        """Bytes ``[start, end)`` of ``name`` (``end`` None: to the end); ``etag``: only that version."""
        options: dict[str, Any] = {}
        if end is not None:
            options["range"] = (start, end)
        elif start:
            options["range"] = {"offset": start}
        if etag:
            options["if_match"] = etag
        try:
            result = self._obs.get(self._store, name, options=options)
            meta = _meta(result.meta)
            first, last = result.range
        except Exception as err:  # noqa: BLE001
            raise translate(err, f"get {self.url.child(name)}") from None
        return RangeStream(meta, first, last, self._chunks(result, name))

    def _chunks(self, result: Any, name: str) -> Iterator[bytes | memoryview]:
        try:
            for chunk in result.stream(min_chunk_size=self.config.chunk_bytes):
                yield memoryview(chunk)
        except Exception as err:  # noqa: BLE001
            raise translate(err, f"get {self.url.child(name)} (body)") from None

    def put(self, name: str, source: Path | bytes, attributes: dict[str, str] | None = None) -> str | None:
        """Store ``source`` (a local file or bytes) as ``name``; its ETag. Multipart above ``part_bytes``
        (or ``max_single_put_bytes`` when set).

        ``attributes``: user metadata stored with the object (S3 ``x-amz-meta-*``; read back by
        ``attributes``). A single PUT of a file sends it memory-mapped: its bytes stay in the page
        cache, not in this process's heap, however large the object.
        """
        size = source.stat().st_size if isinstance(source, Path) else len(source)
        if self.url.is_local:
            os.makedirs(self.url.prefix, exist_ok=True)  # a new output folder, as for a new prefix in a bucket
        multipart = size > (self.config.max_single_put_bytes or self.config.part_bytes)
        try:
            if isinstance(source, Path) and not multipart and size:
                result = self._put_mapped(name, source, attributes)
            else:
                result = self._put(name, b"" if isinstance(source, Path) and not size else source, multipart,
                                   attributes)
        except Exception as err:  # noqa: BLE001
            raise translate(err, f"put {self.url.child(name)}") from None
        etag = result.get("e_tag")
        return str(etag) if etag is not None else None

    def _put_mapped(self, name: str, source: Path, attributes: dict[str, str] | None) -> Any:
        """One PUT of a file's bytes, memory-mapped. A failed request may still hold the mapping's buffer
        (its traceback does): the mapping is then left to the garbage collector, not closed under it."""
        with open(source, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return self._put(name, memoryview(mapped), False, attributes)
        finally:
            with contextlib.suppress(BufferError):
                mapped.close()

    def _put(self, name: str, source: Any, multipart: bool, attributes: dict[str, str] | None) -> Any:
        return self._obs.put(self._store, name, source, use_multipart=multipart, chunk_size=self.config.part_bytes,
                             attributes=attributes or None)

    def attributes(self, name: str) -> tuple[ObjectMeta, dict[str, str]]:
        """The object's metadata and the attributes it was stored with (one HEAD request)."""
        try:
            result = self._obs.get(self._store, name, options={"head": True})
            return _meta(result.meta), {str(k): str(v) for k, v in result.attributes.items()}
        except Exception as err:  # noqa: BLE001
            raise translate(err, f"head {self.url.child(name)}") from None

    def copy(self, source: str, destination: str) -> None:
        """Copy object ``source`` to ``destination`` inside the store (server side; attributes kept)."""
        try:
            self._obs.copy(self._store, source, destination)
        except Exception as err:  # noqa: BLE001
            raise translate(err, f"copy {self.url.child(source)} to {self.url.child(destination)}") from None

    def delete(self, names: Sequence[str]) -> None:
        try:
            self._obs.delete(self._store, list(names))
        except Exception as err:  # noqa: BLE001
            raise translate(err, f"delete {len(names)} object(s) under {self.url}") from None

    def close(self) -> None:
        self._built = None


def translate(err: BaseException, what: str) -> TransportError:
    """``err`` from obstore as a TransportError with the right kind and a scrubbed one-line message."""
    name = type(err).__name__
    full = str(err)
    code = next((c for c in _S3_CODES if f"<Code>{c}</Code>" in full), None)
    text = scrub(full.strip().split("\n", 1)[0])[:600] + (f" [{code}]" if code else "")
    detail = f"{name}: {text}"
    if isinstance(err, (FileNotFoundError, IsADirectoryError)) or code in ("NoSuchBucket", "NoSuchKey"):
        return TransportError(ErrorKind.NOT_FOUND, what, detail)
    if isinstance(err, PermissionError) or name in ("PermissionDeniedError", "UnauthenticatedError") \
            or any(code in text for code in _ACCESS_CODES):
        return TransportError(ErrorKind.ACCESS, what, detail)
    if name in ("PreconditionError", "NotModifiedError"):
        return TransportError(ErrorKind.CHANGED, what, detail)
    if name in _FATAL_NAMES or isinstance(err, (ValueError, TypeError)):
        return TransportError(ErrorKind.FATAL, what, detail)
    return TransportError(ErrorKind.TRANSIENT, what, detail)


_S3_CODES = ("NoSuchBucket", "NoSuchKey", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
             "SlowDown", "InternalError", "InvalidBucketName")
_ACCESS_CODES = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403 Forbidden", "ExpiredToken")
_FATAL_NAMES = {"InvalidPathError", "NotSupportedError", "UnknownConfigurationKeyError", "AlreadyExistsError",
                "NotImplementedError"}


def _meta(doc: Any) -> ObjectMeta:
    modified = doc.get("last_modified")
    etag = doc.get("e_tag")
    return ObjectMeta(name=str(doc["path"]), size=int(doc["size"]), etag=str(etag) if etag else None,
                      mtime_s=modified.timestamp() if modified is not None else 0.0)


def _client_options(config: RemoteConfig, allow_http: bool) -> ClientConfig:
    return {
        "allow_http": allow_http,
        "connect_timeout": timedelta(seconds=config.connect_timeout_s),
        "read_timeout": timedelta(seconds=config.stall_s),
        "timeout": _REQUEST_TIMEOUT,
    }


def _retry_config(config: RemoteConfig) -> RetryConfig:
    backoff: BackoffConfig = {"init_backoff": timedelta(seconds=config.backoff_s),
               "max_backoff": timedelta(seconds=config.max_backoff_s), "base": 2}
    return {"max_retries": config.request_retries, "retry_timeout": timedelta(seconds=config.timeout_s),
            "backoff": backoff}


def _build_store(url: StoreUrl, config: RemoteConfig) -> Any:
    from obstore import store as stores

    if url.scheme is Scheme.FILE:
        return stores.LocalStore(prefix=url.prefix)
    retry = _retry_config(config)
    try:
        if url.scheme is Scheme.S3:
            return _s3_store(stores, url, config, retry)
        if url.scheme is Scheme.GS:
            return stores.GCSStore(url.bucket, prefix=url.prefix or None,
                                   client_options=_client_options(config, False), retry_config=retry)
        return stores.AzureStore(url.bucket, prefix=url.prefix or None,
                                 client_options=_client_options(config, False), retry_config=retry)
    except Exception as err:  # noqa: BLE001 - obstore reports configuration problems as several types
        raise RemoteConfigError(f"cannot set up a client for {url}: {scrub(str(err).splitlines()[0])}; check the "
                                "environment (credentials, region, endpoint)", url=str(url)) from None


def _s3_store(stores: Any, url: StoreUrl, config: RemoteConfig, retry: RetryConfig) -> Any:
    endpoint = next((os.environ[v] for v in _ENDPOINT_VARS if os.environ.get(v)), None)
    kwargs: dict[str, Any] = {}
    if endpoint is not None:
        # An S3-compatible server: path-style requests (the bucket is not a host name) to the endpoint.
        kwargs.update(endpoint=endpoint, virtual_hosted_style_request=False)
        if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
            kwargs["region"] = "us-east-1"
    provider = _profile_credentials()
    if provider is not None:
        kwargs["credential_provider"] = provider
    allow_http = endpoint is not None and endpoint.lower().startswith("http://")
    return stores.S3Store(url.bucket, prefix=url.prefix or None, client_options=_client_options(config, allow_http),
                          retry_config=retry, **kwargs)


def _profile_credentials() -> Any:
    """boto3's credentials for an AWS profile, when no key is in the environment and a profile is configured."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return None
    home = Path.home() / ".aws"
    configured = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_SHARED_CREDENTIALS_FILE") \
        or os.environ.get("AWS_CONFIG_FILE") or (home / "credentials").exists() or (home / "config").exists()
    if not configured:
        return None
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError as err:
        if os.environ.get("AWS_PROFILE"):
            raise RemoteConfigError("AWS_PROFILE is set: reading profiles needs boto3 (pip install boto3), or put "
                                    "the keys in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY") from err
        return None
    session = boto3.Session()
    credentials = session.get_credentials()
    if credentials is None:
        return None
    frozen = credentials.get_frozen_credentials()
    register_secret(frozen.secret_key)
    register_secret(frozen.token)
    return Boto3CredentialProvider(session)
