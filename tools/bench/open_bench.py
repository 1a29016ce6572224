"""Time to open a large shard manifest and get the first batch: ``python -m tools.bench.open_bench``.

Builds index sidecars for N samples over sparse shard files (no image data: this
measures metadata handling, not decoding), then times, in one run:
``ShardDataset(path)`` construction, ``DataLoader(..., shuffle=True)`` construction,
and the first batch (which includes the epoch's global permutation).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.tar.index import ShardIndex, write_index
from dataprep.formats.manifest import Manifest, ShardInfo, Totals, write_manifest
from tools.common.report import add_output_args, emit, format_table

SAMPLE_BYTES = 2048  # every fake sample: one 512-byte header, one field of 100 bytes, padding


def make_fake_shards(root: Path, num_samples: int, num_shards: int) -> None:
    """Index sidecars + sparse tar-sized files + a manifest for ``num_samples`` samples."""
    per = -(-num_samples // num_shards)
    infos = []
    for s in range(num_shards):
        n = min(per, num_samples - s * per)
        name = f"shard-{s:06d}.tar"
        offsets = np.arange(n, dtype=np.int64) * SAMPLE_BYTES
        keys = b"".join(b"s%06dk%07d" % (s, i) for i in range(n))
        index = ShardIndex(shard=name, shard_bytes=n * SAMPLE_BYTES, fields=("bin",), sample_offset=offsets,
                           sample_size=np.full(n, SAMPLE_BYTES, np.int64), field_offset=(offsets + 512)[:, None],
                           field_size=np.full((n, 1), 100, np.int64), key_end=np.arange(1, n + 1, dtype=np.int64) * 15,
                           key_blob=np.frombuffer(keys, dtype=np.uint8))
        write_index(root / f"{name}.idx", index)
        with open(root / name, "wb") as f:
            f.truncate(n * SAMPLE_BYTES)
        infos.append(ShardInfo(name=name, num_samples=n, bytes=n * SAMPLE_BYTES, sha256="0" * 64, index=f"{name}.idx",
                               fields=("bin",)))
    write_manifest(root, Manifest("wds", "adopted", tuple(infos), Totals(num_samples, num_samples, 0, {})))


def measure(root: Path, batch_size: int) -> dict[str, float]:
    from loaders import DataLoader, ShardDataset

    t0 = time.perf_counter()
    dataset = ShardDataset(root)
    t1 = time.perf_counter()
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=0)
    t2 = time.perf_counter()
    batch = next(iter(loader))
    t3 = time.perf_counter()
    if len(batch["bin"]) != batch_size:
        raise RuntimeError(f"first batch has {len(batch['bin'])} samples, expected {batch_size}")
    return {"open_dataset_s": t1 - t0, "make_loader_s": t2 - t1, "first_batch_s": t3 - t2, "total_s": t3 - t0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.open_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=256)
    add_output_args(parser, plot=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="open_bench-") as tmp:
        make_fake_shards(Path(tmp), args.samples, args.shards)
        result = measure(Path(tmp), args.batch_size)
    rows = [[name, f"{value:.3f}"] for name, value in result.items()]
    table = format_table(["step", "seconds"], rows, title=f"{args.samples:,} samples in {args.shards:,} shards")
    emit("open_bench", table, {"samples": args.samples, "shards": args.shards, **result}, args.json, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
