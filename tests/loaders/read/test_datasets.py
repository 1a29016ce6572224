"""ShardDataset / ParquetShardDataset over real dataprep outputs."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dataprep.formats.tar.index import ShardIndex, write_index
from dataprep.formats.manifest import Manifest, ShardInfo, Totals, read_manifest, write_manifest
from loaders import ParquetShardDataset, SampleError, SampleIndex, ShardDataset, ShardError
from loaders.read.transforms import RandomResizedCropDecode
from tests.samples import tar_samples


def test_round_trip_yields_exactly_the_kept_samples(image_shards):
    ds = ShardDataset(image_shards)
    expected = tar_samples(image_shards)
    assert len(ds) == len(expected) == read_manifest(image_shards).totals.samples_kept
    seen = set()
    for i in range(len(ds)):
        sample = ds[i]
        raw = expected[sample["__key__"]]
        assert sample["jpg"] == raw["jpg"]
        assert sample["cls"] == int(raw["cls"])
        assert sample["__index__"] == i
        seen.add(sample["__key__"])
    assert seen == set(expected)


def test_field_projection_and_unknown_field(image_shards):
    ds = ShardDataset(image_shards, fields=("cls",))
    assert set(ds[0]) == {"__key__", "__index__", "__shard__", "cls"}
    with pytest.raises(ShardError, match="no shard has field"):
        ShardDataset(image_shards, fields=("depth",))


def test_per_sample_randomness_keyed_by_seed_epoch_index(image_shards):
    ds = ShardDataset(image_shards, transform=RandomResizedCropDecode(32), seed=5)
    assert ds.releases_gil
    a = ds[SampleIndex(3, 0)]["image"]
    assert np.array_equal(a, ds[SampleIndex(3, 0)]["image"])
    assert a.dtype == np.uint8 and a.shape == (32, 32, 3)
    assert not np.array_equal(a, ds[SampleIndex(3, 1)]["image"])
    clone = pickle.loads(pickle.dumps(ds))  # what a process worker gets
    assert np.array_equal(a, clone[SampleIndex(3, 0)]["image"])


def test_plain_transform_reseeds_global_rngs_and_asks_for_processes(image_shards):
    ds = ShardDataset(image_shards, transform=lambda s: {**s, "r": np.random.rand()})
    assert not ds.releases_gil
    assert ds[SampleIndex(1, 0)]["r"] == ds[SampleIndex(1, 0)]["r"] != ds[SampleIndex(2, 0)]["r"]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_missing_or_truncated_shard_fails_at_construction(image_shards, tmp_path):
    broken = _copy(image_shards, tmp_path / "missing")
    first = read_manifest(broken).shards[0]
    (broken / first.name).unlink()
    with pytest.raises(ShardError, match=first.name):
        ShardDataset(broken)
    short = _copy(image_shards, tmp_path / "short")
    with open(short / first.name, "r+b") as f:
        f.truncate(first.bytes - 512)
    with pytest.raises(ShardError, match="truncated"):
        ShardDataset(short)
    (short / first.name).unlink()
    with pytest.raises(ShardError):
        ShardDataset(tmp_path)  # no manifest


def test_corrupt_sample_names_shard_key_and_offset(image_shards, tmp_path):
    broken = _copy(image_shards, tmp_path / "corrupt")
    ds = ShardDataset(broken, transform=RandomResizedCropDecode(32))
    off, size = (int(ds.shards.field_offset[0, ds.shards.fields.index("jpg")]),
                 int(ds.shards.field_size[0, ds.shards.fields.index("jpg")]))
    shard = broken / ds.shards.shard_name(0)
    data = bytearray(shard.read_bytes())
    data[off + 2 : off + size] = b"\x00" * (size - 2)
    shard.write_bytes(bytes(data))
    with pytest.raises(SampleError) as exc:
        ShardDataset(broken, transform=RandomResizedCropDecode(32))[0]
    assert exc.value.key == ds.shards.key(0)
    assert ds.shards.key(0) in str(exc.value)


def test_parquet_dataset(table_shards, image_shards):
    ds = ParquetShardDataset(table_shards, columns=["id", "name", "__key__"])
    manifest = read_manifest(table_shards)
    assert len(ds) == manifest.totals.samples_kept
    rows = [pq.read_table(table_shards / s.name).to_pylist() for s in manifest.shards]
    flat = [r for shard in rows for r in shard]
    for i in (0, 1, len(ds) // 2, len(ds) - 1):
        assert ds[i]["id"] == flat[i]["id"] and ds[i]["__key__"] == flat[i]["__key__"]
    assert ds.block_size >= 1
    sampler = ds.default_sampler(shuffle=True)
    assert sorted(int(s.index) for s in sampler) == list(range(len(ds)))
    with pytest.raises(ShardError, match="use ShardDataset"):
        ParquetShardDataset(image_shards)
    with pytest.raises(ShardError, match="use ParquetShardDataset"):
        ShardDataset(table_shards)


def test_million_sample_manifest_opens(tmp_path):
    """10^6 samples in 10 shards: metadata is numpy arrays, not Python objects per sample."""
    n, shards = 1_000_000, 10
    per = n // shards
    infos = []
    for s in range(shards):
        name = f"shard-{s:06d}.tar"
        offsets = np.arange(per, dtype=np.int64) * 2048
        index = ShardIndex(name, per * 2048, ("cls", "jpg"), offsets, np.full(per, 2048, np.int64),
                           np.stack([offsets + 1536, offsets + 512], axis=1),
                           np.tile(np.array([1, 100], np.int64), (per, 1)),
                           np.arange(1, per + 1, dtype=np.int64) * 7,
                           np.frombuffer(b"".join(b"k%06d" % i for i in range(per)), dtype=np.uint8))
        write_index(tmp_path / (name + ".idx"), index)
        with open(tmp_path / name, "wb") as f:
            f.truncate(per * 2048)
        infos.append(ShardInfo(name, per, per * 2048, "0" * 64, name + ".idx", ("cls", "jpg")))
    write_manifest(tmp_path, Manifest("wds", "adopted", tuple(infos), Totals(n, n, 0, {})))
    ds = ShardDataset(tmp_path, fields=("jpg",))
    assert len(ds) == n
    assert ds.shards.key(n - 1) == "k099999"
    assert ds[n - 1]["jpg"] == b"\0" * 100


def test_dataloader_over_parquet_reads_every_row_once(table_shards):
    from loaders import DataLoader

    ds = ParquetShardDataset(table_shards, columns=["id", "__key__"])
    assert ds.releases_gil
    loader = DataLoader(ds, batch_size=16, shuffle=True, seed=1, num_workers=2)
    assert loader.worker_type == "thread"
    keys = [k for batch in loader for k in batch["__key__"]]
    assert sorted(keys) == sorted(ds[i]["__key__"] for i in range(len(ds)))
    assert len(keys) == len(set(keys)) == len(ds)
