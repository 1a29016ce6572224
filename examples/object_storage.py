"""Shard to object storage (s3://, gs://, az://) with dataprep, and read the shards back through the node's cache.

    pip install 'shardfeed[remote]'
    export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_DEFAULT_REGION=us-east-1
    python examples/object_storage.py s3://my-bucket/shards --raw raw/images --cache-dir /tmp/shard-cache
    python examples/object_storage.py s3://my-bucket/shards --cache-dir /tmp/shard-cache  # read only: from the cache
    python examples/object_storage.py s3://my-bucket/shards --endpoint http://127.0.0.1:9000 ...  # MinIO, moto...

With ``--raw``, step 1 is ``dataprep shard RAW URL`` (in-process here; the same command in a shell):
shards are staged on local disk, uploaded, and the manifest written last, so a reader never sees
half a dataset; rerun over the same URL, it finds the dataset complete (a killed run resumes).
Step 2 reads URL with ``ShardDataset(URL, cache_dir=..., cache_limit=...)``: shards are downloaded
ahead of use into the node-wide cache (one folder per node, shared by its ranks and workers,
never above ``--cache-limit``; checked against the manifest's sha256), and a second pass, or
another process on the node, reads them from there. It prints the samples read per class and
what the cache holds. The endpoint and credentials come from the environment as for any S3
client (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...); ``--endpoint`` sets ``AWS_ENDPOINT_URL``
for this process (an ``http://`` endpoint is allowed as plain HTTP).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from dataprep.cli import main as dataprep
from loaders import CenterCropDecode, DataLoader, ShardDataset
from loaders.cache.layout import CacheLayout


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("url", help="the dataset's store URL: s3://bucket/prefix (gs://, az://)")
    parser.add_argument("--raw", type=Path, help="shard this image folder to URL first (default: only read URL)")
    parser.add_argument("--endpoint", help="the S3-compatible endpoint (default: AWS_ENDPOINT_URL, else AWS's)")
    parser.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "shardfeed-cache",
                        help="the node's shard cache, on local disk")
    parser.add_argument("--cache-limit", default="2GiB", help="the most the cache holds (bytes, or 500MiB, 2GiB)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="loader workers")
    return parser.parse_args(argv)


def shard_to_store(raw: Path, url: str) -> None:
    """``dataprep shard RAW URL --resize-short 64``; SystemExit with its status when it fails."""
    status = dataprep(["shard", str(raw), url, "--resize-short", "64"])
    if status != 0:
        raise SystemExit(status)


def read_through_cache(args: argparse.Namespace) -> Counter[int]:
    """One epoch of ``args.url`` through the node cache: samples per class."""
    dataset = ShardDataset(args.url, fields=("jpg", "cls"), transform=CenterCropDecode(32),
                           cache_dir=args.cache_dir, cache_limit=args.cache_limit)
    classes: Counter[int] = Counter()
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
    with loader:
        for batch in loader:  # uint8 [B, 32, 32, 3] images, int64 [B] labels
            classes.update(batch["cls"].tolist())
    return classes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.endpoint:
        os.environ["AWS_ENDPOINT_URL"] = args.endpoint  # the client reads it, as boto3 and the AWS CLI do
    if args.raw is not None:
        shard_to_store(args.raw, args.url)
    classes = read_through_cache(args)
    layout = CacheLayout(args.cache_dir)
    print(f"{sum(classes.values())} samples read from {args.url}: " +
          ", ".join(f"class {c}: {n}" for c, n in sorted(classes.items())), flush=True)
    print(f"cache {args.cache_dir}: {len(layout.object_keys())} objects (shards and their index files), "
          f"{layout.usage_bytes():,} bytes on disk",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
