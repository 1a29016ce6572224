"""Object storage for dataprep and loaders: URLs, a client with retries, errors (``pip install 'shardfeed[remote]'``).

Modules:
    url        ``StoreUrl``/``parse_url``: s3://, gs://, az://, file:// and local paths, parsed once
    config     ``RemoteConfig``: time-outs, retries, backoff, part and chunk sizes; ``TransportMode``
    client     ``RemoteStore``: list / head / ranged reads as a stream / put / delete, retried, per process
    retry      ``Retrier``: exponential backoff with full jitter, bounded by a time-out without progress
    transport  the one module that calls obstore: the store from the environment, single requests, error kinds
    helper     the transfer helper process for processes where obstore cannot run (forked children)
    scrub      secrets out of every message
    errors     ``RemoteError`` and its subclasses (under ``DataprepError``)

obstore is imported only when a request is made, so ``dataprep`` works without it.
"""

from __future__ import annotations

from dataprep.remote.client import RemoteStore, inline_transport_safe
from dataprep.remote.config import RemoteConfig, TransportMode
from dataprep.remote.errors import (
    RemoteAccessError,
    RemoteChangedError,
    RemoteConfigError,
    RemoteError,
    RemoteNotFoundError,
    RemoteTimeoutError,
)
from dataprep.remote.transport import ObjectMeta
from dataprep.remote.url import Scheme, StoreUrl, is_remote_url, parse_url

__all__ = [
    "ObjectMeta",
    "RemoteAccessError",
    "RemoteChangedError",
    "RemoteConfig",
    "RemoteConfigError",
    "RemoteError",
    "RemoteNotFoundError",
    "RemoteStore",
    "RemoteTimeoutError",
    "Scheme",
    "StoreUrl",
    "TransportMode",
    "inline_transport_safe",
    "is_remote_url",
    "parse_url",
]
