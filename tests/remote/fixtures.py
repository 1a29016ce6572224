"""Fixtures for every test that talks to object storage: a real S3 server, the fault proxy, buckets, datasets.

- ``s3_server`` (session): moto's S3 server (``ThreadedMotoServer``) on 127.0.0.1, a free port.
- ``proxy``: a ``FaultProxy`` in front of it (fresh counters and faults per test).
- ``s3_env``: the environment a user would set (keys, region, ``AWS_ENDPOINT_URL`` = the proxy),
  so every client, helper and child process goes through the proxy. The secret key is
  ``S3_SECRET``, a marker tests search for in logs and files.
- ``bucket``: a new, empty bucket (made with boto3, a real S3 client, over HTTP).
- ``remote_dataset``: a dataprep-style dataset (manifest + shards of random bytes) in that bucket.

Import them into a ``conftest.py`` (``from tests.remote.fixtures import *``).
"""

from __future__ import annotations

import hashlib
import logging
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dataprep.formats.manifest import FORMAT_WDS, Manifest, ShardInfo, Totals, manifest_bytes
from tools.common.fault_proxy import FaultProxy

__all__ = [
    "S3_ACCESS_KEY",
    "S3_SECRET",
    "RemoteDataset",
    "S3Server",
    "bucket",
    "make_bucket",
    "proxy",
    "remote_dataset",
    "s3_env",
    "s3_server",
    "write_dataset",
]

S3_ACCESS_KEY = "AKIASHARDFEEDTEST01"
S3_SECRET = "sfsecret-" + uuid.uuid4().hex  # unique per session: a hit in a log or file is ours
S3_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    """The running server: ``endpoint`` is its own address (no faults)."""

    endpoint: str


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    with FaultProxy(s3_server.endpoint, seed=0) as p:
        yield p


@pytest.fixture
def s3_env(proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> str:
    """The user's environment, pointed at the proxy; returns the endpoint."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", S3_REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    return proxy.endpoint


def make_bucket(endpoint: str, name: str | None = None) -> str:
    """Create a bucket through the S3 API with boto3; returns its name."""
    import boto3

    name = name or f"sf-{uuid.uuid4().hex[:16]}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name=S3_REGION, aws_access_key_id=S3_ACCESS_KEY,
                          aws_secret_access_key=S3_SECRET)
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return make_bucket(s3_server.endpoint)


@dataclass(frozen=True)
class RemoteDataset:
    """A dataset written to ``url``: ``shards`` maps each shard name to its bytes; ``manifest`` as stored."""

    url: str
    manifest: Manifest
    shards: dict[str, bytes]

    def key(self, name: str) -> str:
        """The proxy's counter key of object ``name`` (the path after the bucket)."""
        prefix = self.url.split("://", 1)[1].split("/", 1)[1]
        return f"{prefix}/{name}"


def write_dataset(url: str, sizes: list[int], *, seed: int = 0, staging: Path | None = None) -> RemoteDataset:
    """Write shards of random bytes of ``sizes`` and a manifest (written last) to ``url`` with the real client."""
    from dataprep.remote import RemoteStore

    rng = random.Random(seed)
    shards = {f"shard-00000-{i:06d}.tar": rng.randbytes(size) for i, size in enumerate(sizes)}
    infos = tuple(ShardInfo(name=name, num_samples=1, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
                  for name, data in shards.items())
    manifest = Manifest(format=FORMAT_WDS, layout="adopted", shards=infos,
                        totals=Totals(inputs_seen=len(infos), samples_kept=len(infos)), rejects=None)
    with RemoteStore(url) as store:
        for name, data in shards.items():
            store.put(name, data)
        store.put("manifest.json", manifest_bytes(manifest))
    return RemoteDataset(url=url, manifest=manifest, shards=shards)


@pytest.fixture
def remote_dataset(s3_env: str, bucket: str) -> RemoteDataset:
    """Eight shards of 96-160 KiB under ``s3://BUCKET/data``."""
    sizes = [random.Random(i).randrange(96 << 10, 160 << 10) for i in range(8)]
    return write_dataset(f"s3://{bucket}/data", sizes)


