"""Where a dataset lives, parsed once: ``s3://bucket/prefix``, ``gs://``, ``az://``, ``file://`` or a local path.

``StoreUrl`` is the value every later step takes; object names are ``/``-separated and
relative to its prefix (``url.child("shard-00000-000000.tar")``). Parsing refuses what
would silently point elsewhere: a missing bucket, ``..`` or empty segments in a key,
query strings and fragments, a relative ``file://`` path.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dataprep.remote.errors import RemoteConfigError

__all__ = ["Scheme", "StoreUrl", "is_remote_url", "parse_url"]


class Scheme(enum.StrEnum):
    """The stores a URL can name (obstore's S3, GCS, Azure and local-filesystem stores)."""

    S3 = "s3"
    GS = "gs"
    AZ = "az"
    FILE = "file"


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,254}$")
_REMOTE = (Scheme.S3, Scheme.GS, Scheme.AZ)


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A parsed store location.

    ``bucket``: the bucket (S3, GCS) or container (Azure); empty for ``file``.
    ``prefix``: the key prefix inside the bucket without leading or trailing ``/`` (may be
    empty); for ``file``, the absolute directory path.
    """

    scheme: Scheme
    bucket: str
    prefix: str

    @property
    def is_local(self) -> bool:
        return self.scheme is Scheme.FILE

    @property
    def local_path(self) -> Path:
        """The directory of a ``file`` URL; RemoteConfigError for a remote one."""
        if not self.is_local:
            raise RemoteConfigError(f"{self} is not a local path", url=str(self))
        return Path(self.prefix)

    @property
    def root(self) -> str:
        """The URL of the bucket (or of ``/`` for a local path): what the transport connects to."""
        return "file:///" if self.is_local else f"{self.scheme}://{self.bucket}"

    def child(self, name: str) -> StoreUrl:
        """The URL of ``name`` (``/``-separated, relative) under this prefix."""
        clean = _check_key(name, what=f"object name {name!r} under {self}")
        if not clean:
            return self
        return StoreUrl(self.scheme, self.bucket, f"{self.prefix.rstrip('/')}/{clean}" if self.prefix else clean)

    def key(self, name: str) -> str:
        """The full key of ``name`` in the bucket (for a local URL: the absolute path)."""
        return self.child(name).prefix

    def __str__(self) -> str:
        if self.is_local:
            return f"file://{self.prefix}"
        return f"{self.scheme}://{self.bucket}/{self.prefix}" if self.prefix else f"{self.scheme}://{self.bucket}"


def is_remote_url(text: str | os.PathLike[str]) -> bool:
    """True for ``s3://``, ``gs://`` and ``az://`` URLs (what needs the ``remote`` extra)."""
    return isinstance(text, str) and text.split("://", 1)[0].lower() in {s.value for s in _REMOTE} and "://" in text


def parse_url(text: str | os.PathLike[str] | StoreUrl) -> StoreUrl:
    """``text`` as a StoreUrl; RemoteConfigError naming the problem and the accepted forms."""
    if isinstance(text, StoreUrl):
        return text
    if not isinstance(text, str):
        return _local(Path(text))
    if "://" not in text:
        return _local(Path(text))
    parts = urlsplit(text)
    scheme_text = parts.scheme.lower()
    try:
        scheme = Scheme(scheme_text)
    except ValueError:
        raise RemoteConfigError(f"{text!r}: unsupported scheme {scheme_text!r}; use s3://, gs://, az://, file:// "
                                "or a local path", url=text) from None
    if parts.query or parts.fragment:
        raise RemoteConfigError(f"{text!r}: a store URL takes no query or fragment ('?', '#')", url=text)
    if scheme is Scheme.FILE:
        if parts.netloc not in ("", "localhost"):
            raise RemoteConfigError(f"{text!r}: file URLs name a local path (file:///abs/path)", url=text)
        return _local(Path(unquote(parts.path)), text)
    bucket = parts.netloc
    if "@" in bucket:
        host = bucket.rsplit("@", 1)[1]
        raise RemoteConfigError(f"{scheme}://...@{host}: credentials in a URL are refused (they would reach logs "
                                "and manifests); use the environment or a profile", url=f"{scheme}://{host}")
    if not _BUCKET.match(bucket):
        raise RemoteConfigError(f"{text!r}: {bucket!r} is not a bucket name ({scheme}://BUCKET/PREFIX; lowercase "
                                "letters, digits, '.', '-', 3-255 characters)", url=text)
    prefix = _check_key(unquote(parts.path).strip("/"), what=text)
    return StoreUrl(scheme, bucket, prefix)


def _local(path: Path, text: str | None = None) -> StoreUrl:
    if text is not None and not path.is_absolute():
        raise RemoteConfigError(f"{text!r}: a file URL needs an absolute path (file:///abs/path)", url=text)
    return StoreUrl(Scheme.FILE, "", os.path.abspath(path))


def _check_key(key: str, *, what: str) -> str:
    if not key:
        return ""
    segments = key.split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise RemoteConfigError(f"{what}: empty, '.' or '..' segments are not allowed in a key", url=what)
    return key
