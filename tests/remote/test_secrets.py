"""The secret key set in the environment appears in no log line at any level, no error and no file we write."""

from __future__ import annotations

import logging
import os
import traceback
from pathlib import Path

import pytest

from dataprep.remote import RemoteConfig, RemoteError, RemoteStore
from dataprep.remote.scrub import register_secret, scrub
from loaders.cache import CacheError, ShardCache
from tools.common.fault_proxy import Fault, FaultKind, FaultProxy
from tests.remote.fixtures import S3_SECRET, RemoteDataset

FAST = RemoteConfig(timeout_s=2.0, stall_s=0.5, connect_timeout_s=0.5, backoff_s=0.01, max_backoff_s=0.05)


def test_scrub_masks_credentials_and_signatures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret-123456")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "sessiontoken-abcdef")
    register_secret("profilesecret-999")
    text = ("key envsecret-123456 token sessiontoken-abcdef profile profilesecret-999 "
            "GET /b/k?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA/2026&sig=azuresig "
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIA/x, Signature=cafe\n"
            '{"secret_access_key": "inline-secret"}')
    cleaned = scrub(text)
    for secret in ("envsecret-123456", "sessiontoken-abcdef", "profilesecret-999", "deadbeef", "AKIA/2026",
                   "azuresig", "cafe", "inline-secret"):
        assert secret not in cleaned, secret
    assert "GET /b/k?" in cleaned and "X-Amz-Signature=***" in cleaned


def _trip(action: object) -> list[str]:
    """Run ``action`` (a callable), returning its exception formatted with every cause, or nothing."""
    try:
        action()  # type: ignore[operator]
    except (RemoteError, CacheError) as err:
        return traceback.format_exception(err)
    return []


def test_the_secret_appears_nowhere(remote_dataset: RemoteDataset, proxy: FaultProxy, tmp_path: Path,
                                    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, every level
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == S3_SECRET
    names = list(remote_dataset.shards)
    texts: list[str] = []
    proxy.add(Fault(FaultKind.SLOWDOWN, method=None, key="data/", times=None, fraction=0.3))
    proxy.add(Fault(FaultKind.FLIP, key=remote_dataset.key(names[1]), after_bytes=3, times=None))
    with ShardCache.open_dataset(remote_dataset.url, cache_dir=tmp_path / "cache", cache_limit="64MiB",
                                 remote=FAST, max_refetches=1) as cache:
        cache.plan(0, {"rank0": names})
        texts += _trip(lambda: cache.open(names[0]).release())
        texts += _trip(lambda: cache.open(names[1]))  # integrity error, after retries and re-fetches
        texts += _trip(lambda: cache.open("not-in-the-manifest.bin"))  # not found
        with RemoteStore(remote_dataset.url, RemoteConfig(timeout_s=2.0, stall_s=0.5, transport="helper")) as store:
            texts += _trip(lambda: store.read_bytes("missing"))  # through a helper process
            proxy.stop()
            texts += _trip(lambda: store.read_bytes(names[2]))  # the server gone, from the helper
        texts += _trip(lambda: RemoteStore(remote_dataset.url, FAST).head(names[3]))
    assert len(texts) >= 5 and any("retrying" in r.getMessage() for r in caplog.records)
    out, err = capfd.readouterr()
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    for where, text in [("logs", logged), ("errors", "".join(texts)), ("stdout", out), ("stderr", err)]:
        assert S3_SECRET not in text, where
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert S3_SECRET.encode() not in path.read_bytes(), path
