"""Fixtures of the cache tests: the object-storage ones (``tests.remote.fixtures``) and image shards in the store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.loaders.cache.remote_images import upload
from tests.remote.fixtures import bucket, proxy, remote_dataset, s3_env, s3_server  # noqa: F401
from tests.samples import image_dataset


@pytest.fixture(scope="session")
def image_folder(raw_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 images (short side 256) in 8 tar shards of 6, about 100-200 KB each, with index sidecars."""
    return image_dataset(tmp_path_factory.mktemp("cache-images"), raw_dataset / "images", per_shard=6,
                         resize_short=256, order_seed=0).shards


@pytest.fixture(scope="session")
def image_folder_v2(raw_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same images sharded again with another seed: the same shard names, other bytes (a rewrite)."""
    return image_dataset(tmp_path_factory.mktemp("cache-images-v2"), raw_dataset / "images", per_shard=6,
                         resize_short=256, order_seed=1).shards


@dataclass(frozen=True)
class RemoteImages:
    """``folder`` uploaded to ``url``; ``key(name)`` is the proxy's counter key of object ``name``."""

    url: str
    folder: Path

    def key(self, name: str) -> str:
        return f"{self.url.split('://', 1)[1].split('/', 1)[1]}/{name}"

    @property
    def shards(self) -> list[str]:
        return sorted(p.name for p in self.folder.glob("*.tar"))


@pytest.fixture
def remote_images(s3_env: str, bucket: str, image_folder: Path) -> RemoteImages:  # noqa: F811 - fixtures
    url = f"s3://{bucket}/images"
    upload(image_folder, url)
    return RemoteImages(url, image_folder)
