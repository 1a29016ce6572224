"""The public API of ``dataprep.remote`` and ``loaders.cache`` and their error trees, pinned (fold into
``tests/test_public_api.py`` once the restructure settles)."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "dataprep.remote": [
        "ObjectMeta", "RemoteAccessError", "RemoteChangedError", "RemoteConfig", "RemoteConfigError", "RemoteError",
        "RemoteNotFoundError", "RemoteStore", "RemoteTimeoutError", "Scheme", "StoreUrl", "TransportMode",
        "inline_transport_safe", "is_remote_url", "parse_url",
    ],
    "loaders.cache": [
        "CacheConfig", "CacheEntry", "CacheError", "CacheLimitError", "CacheStats", "CacheTimeoutError", "Catalog",
        "DatasetChangedError", "Lease", "NextUse", "Schedule", "ShardCache", "ShardFetchError",
        "ShardIntegrityError", "disk_bytes", "parse_limit",
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_all_is_pinned_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == PUBLIC[package] == sorted(PUBLIC[package])
    assert all(getattr(module, name) is not None for name in module.__all__)


def test_error_trees() -> None:
    import pickle

    import dataprep.remote as r
    import loaders.cache as c
    from dataprep.errors import DataprepError
    from loaders.errors import ConfigError, LoaderError

    for cls in (r.RemoteConfigError, r.RemoteNotFoundError, r.RemoteAccessError, r.RemoteChangedError,
                r.RemoteTimeoutError):
        assert issubclass(cls, r.RemoteError) and issubclass(cls, DataprepError)
    for cls in (c.CacheLimitError, c.ShardFetchError, c.ShardIntegrityError, c.DatasetChangedError,
                c.CacheTimeoutError):
        assert issubclass(cls, c.CacheError) and issubclass(cls, LoaderError)
    assert issubclass(c.CacheLimitError, ConfigError) and issubclass(c.ShardIntegrityError, c.ShardFetchError)
    err = pickle.loads(pickle.dumps(c.ShardIntegrityError("bad", shard="s.tar", url="s3://b/s.tar")))
    assert (str(err), err.shard, err.url) == ("bad", "s.tar", "s3://b/s.tar")  # errors cross from workers
    remote = pickle.loads(pickle.dumps(r.RemoteTimeoutError("slow", url="s3://b/x")))
    assert (type(remote), str(remote), remote.url) == (r.RemoteTimeoutError, "slow", "s3://b/x")
