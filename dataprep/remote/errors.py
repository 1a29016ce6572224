"""Exceptions raised by the object-store client (``dataprep.remote``).

They join dataprep's tree under ``DataprepError`` (defined here while ``dataprep/errors.py``
is being restructured; they move there when it settles)::

    DataprepError
    └── RemoteError             an object-store operation failed; ``url`` names the object or prefix
        ├── RemoteConfigError   a bad URL, an unusable endpoint, or the ``remote`` extra not installed
        ├── RemoteNotFoundError the object or the bucket does not exist
        ├── RemoteAccessError   credentials missing, refused or without permission
        ├── RemoteChangedError  the object changed while it was being read (its ETag moved)
        └── RemoteTimeoutError  no progress within ``timeout_s``, retries included

Every message names the URL (or the endpoint) and says what to check; none holds a
secret (``dataprep.remote.scrub`` filters what the transport reports).
"""

from __future__ import annotations

from dataprep.errors import DataprepError


class RemoteError(DataprepError):
    """An object-store operation failed; ``url`` is the object or prefix it was about."""

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields survive pickling (errors cross from worker processes).
        return _rebuild, (type(self), str(self), self.url)


def _rebuild(cls: type[RemoteError], message: str, url: str) -> RemoteError:
    return cls(message, url=url)


class RemoteConfigError(RemoteError, ValueError):
    """A URL that cannot be parsed, an endpoint that cannot be used, or obstore missing."""


class RemoteNotFoundError(RemoteError):
    """The object, or the bucket it would be in, does not exist."""


class RemoteAccessError(RemoteError):
    """The store refused the credentials, or found none (environment, AWS profile, instance role)."""


class RemoteChangedError(RemoteError):
    """The object was replaced while it was being read: its ETag is no longer the one first seen."""


class RemoteTimeoutError(RemoteError):
    """An operation made no progress within the time-out, its retries included."""
