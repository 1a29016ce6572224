"""examples/object_storage.py against a real S3 server (moto on 127.0.0.1, behind the fault proxy): images
sharded to s3://, read back through the node cache; a second run reads the cache, not the store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dataprep.synthetic import SyntheticSpec, make_dataset
from tests.dataprep.remote.bucket_files import keys
from tests.examples.helpers import load_example
from tests.remote.fixtures import S3Server
from tools.common.fault_proxy import FaultProxy

IMAGES = 16


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 good images in 2 classes, and broken inputs that dataprep rejects (a dataset of real life: with no
    reject at all a remote OUT fails today, /work/notes/bug_remote_no_rejects.md)."""
    root = tmp_path_factory.mktemp("object-storage")
    make_dataset(root, SyntheticSpec(images=IMAGES, classes=2, seed=3, broken=True, tables=False, text=False))
    return root / "images"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The example's ``main(ARGS)`` in this process (its imports are this process's: no second torch start)."""
    capsys.readouterr()
    assert load_example("object_storage").main(list(args)) == 0
    return capsys.readouterr().out


def test_shards_to_the_store_and_reads_back_through_the_cache(
        s3_env: str, s3_server: S3Server, bucket: str, proxy: FaultProxy, image_folder: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url, cache = f"s3://{bucket}/shards", tmp_path / "cache"
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # --endpoint gives it (and the monkeypatch puts it back after)
    common = ["--endpoint", s3_env, "--cache-dir", str(cache), "--cache-limit", "64MiB", "--batch-size", "4"]
    first = _run(capsys, url, "--raw", str(image_folder), *common)
    found = re.search(rf"(\d+) samples read from {re.escape(url)}: class 0: (\d+), class 1: (\d+)", first)
    assert found is not None and int(found.group(1)) == IMAGES, first
    assert int(found.group(2)) + int(found.group(3)) == IMAGES
    stored = keys(s3_server.endpoint, bucket, "shards")
    shards = sorted(name for name in stored if name.endswith(".tar"))
    assert "manifest.json" in stored and shards, stored
    assert f"cache {cache}: {2 * len(shards)} objects (shards and their index files)" in first, first
    gets = {name: proxy.requests(f"shards/{name}", "GET") for name in shards}
    assert all(n >= 1 for n in gets.values()), gets

    monkeypatch.delenv("AWS_ENDPOINT_URL")
    second = _run(capsys, url, *common)
    assert f"{IMAGES} samples read from {url}" in second, second
    assert {name: proxy.requests(f"shards/{name}", "GET") for name in shards} == gets  # all from the cache
