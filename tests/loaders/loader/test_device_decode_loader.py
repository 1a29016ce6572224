"""``DataLoader(device="cpu", decode="device")`` against ``decode="cpu"``: the same samples in the same order,
pixels within the stated tolerance, and resume, ``set_epoch``, thread and process workers (fork and a
pickling start method), ranks, the skip budget and ``state_dict`` exactly as with ``decode="cpu"``.

The decoder is nvImageCodec with its CPU backend here: the code path CUDA runs, with another backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import IterableDataset

from loaders import (
    CenterCropDecode,
    Compose,
    ConfigError,
    DataLoader,
    DecodeLabel,
    RandomResizedCropDecode,
    SampleError,
    ShardDataset,
    SkipBudgetError,
    Topology,
)
from loaders.augment import Augment, RandomHorizontalFlip
from tests.loaders.batch_decode.test_device_decode import MAD_ALL, MAD_PER_IMAGE
from tests.loaders.helpers import default_start_method, image_flavours, level_difference, write_image_shards
from tests.samples import photo_jpeg
from tests.loaders.resume_harness import check_resume_chain

WORKERS = [(0, "thread"), (2, "thread"), (2, "process")]


def _dataset(path: Path, *, seed: int = 1, topology: Topology | None = None, size: int = 32) -> ShardDataset:
    return ShardDataset(path, fields=("jpg", "cls"), seed=seed, topology=topology,
                        transform=Compose([RandomResizedCropDecode(size), DecodeLabel()]))


def _loader(path: Path, decode: str, num_workers: int = 2, worker_type: str = "thread", **options: Any
            ) -> DataLoader[Any]:
    dataset = options.pop("dataset", None) or _dataset(path, topology=options.pop("topology", None))
    return DataLoader(dataset, batch_size=options.pop("batch_size", 8), num_workers=num_workers,
                      worker_type=worker_type, device="cpu", decode=decode, seed=3, **options)


Batches = list[tuple[list[str], torch.Tensor, torch.Tensor]]  # (keys, labels, images) per batch


def _read(loader: DataLoader[Any], epochs: tuple[int, ...] = (0,)) -> Batches:
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        out += [(list(b["__key__"]), b["label"].clone(), b["image"].clone()) for b in loader]
    return out


def _assert_parity(cpu: list[Any], device: list[Any]) -> None:
    """The same keys and labels batch by batch; images within the tolerance of
    tests/loaders/batch_decode/test_device_decode.py."""
    assert [keys for keys, _, _ in device] == [keys for keys, _, _ in cpu]
    assert all(torch.equal(a, b) for (_, a, _), (_, b, _) in zip(cpu, device))
    mads = [level_difference(a, b) for (_, _, batch_a), (_, _, batch_b) in zip(cpu, device)
            for a, b in zip(batch_a, batch_b)]
    assert max(mads) <= MAD_PER_IMAGE and np.mean(mads) <= MAD_ALL
    assert all(b.dtype == torch.uint8 and b.shape[1:] == a.shape[1:] for (_, _, a), (_, _, b) in zip(cpu, device))


@pytest.fixture(scope="module")
def cpu_run(image_shards: Path) -> list[Any]:
    with _loader(image_shards, "cpu") as loader:
        return _read(loader, (0, 1))


@pytest.mark.parametrize(("num_workers", "worker_type"), WORKERS)
def test_decode_on_the_device_gives_the_cpu_paths_batches(image_shards: Path, cpu_run: list[Any], num_workers: int,
                                                         worker_type: str) -> None:
    with _loader(image_shards, "device", num_workers, worker_type) as loader:
        assert loader.decode == "device"
        _assert_parity(cpu_run, _read(loader, (0, 1)))
        stats = loader.stats().decode
    assert stats.mode == "device" and stats.decoder is not None
    assert stats.decoder.startswith("nvImageCodec 0.") and stats.decoder.endswith(", CPU")
    assert (stats.counts.device, stats.counts.worker, stats.counts.failed) == (96, 0, 0)  # 2 epochs of 48


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_process_workers_plan_under_a_pickling_start_method(image_shards: Path, cpu_run: list[Any],
                                                            method: str) -> None:
    with default_start_method(method), _loader(image_shards, "device", 2, "process") as loader:
        device = _read(loader, (0,))
    _assert_parity(cpu_run[:len(device)], device)


def test_resume_mid_epoch_and_across_epochs_gives_the_uninterrupted_batches(image_shards: Path) -> None:
    def consume(loader: DataLoader[Any]) -> Any:
        for epoch in range(loader.epoch, 2):
            loader.set_epoch(epoch)
            for batch in loader:
                yield list(batch["__key__"]), batch["image"].clone()

    # 6 batches an epoch: mid-epoch, then across the boundary, resumed in processes after threads.
    check_resume_chain(lambda: _loader(image_shards, "device", 2, "thread"), consume, [2, 7],
                       make_resumed=lambda: _loader(image_shards, "device", 2, "process"))


def test_the_resume_state_is_the_cpu_paths(image_shards: Path) -> None:
    states = {}
    for decode in ("cpu", "device"):
        with _loader(image_shards, decode) as loader:
            iterator = iter(loader)
            for _ in range(3):
                next(iterator)
            states[decode] = loader.state_dict()
    assert states["device"] == states["cpu"]


def test_set_epoch_draws_new_crops_as_the_cpu_path_does(image_shards: Path, cpu_run: list[Any]) -> None:
    with _loader(image_shards, "device") as loader:
        epochs = _read(loader, (0, 1))
    assert [keys for keys, _, _ in epochs] == [keys for keys, _, _ in cpu_run]
    by_key = [{key: image for keys, _, images in run for key, image in zip(keys, images)} for run in
              (epochs[:6], epochs[6:])]
    assert any(not torch.equal(by_key[0][key], by_key[1][key]) for key in by_key[0])  # new draws in epoch 1


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_reads_its_share_as_with_cpu_decode(image_shards: Path, rank: int) -> None:
    runs = {}
    for decode in ("cpu", "device"):
        with _loader(image_shards, decode, topology=Topology(rank=rank, world_size=2), shuffle=True) as loader:
            runs[decode] = _read(loader)
    _assert_parity(runs["cpu"], runs["device"])
    assert sum(len(keys) for keys, _, _ in runs["device"]) == 24


@pytest.fixture(scope="module")
def flavoured_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 samples: photos, and at 3 png, 5 truncated, 7 bad_scan, 9 cmyk, 12 broken_progressive."""
    flavours = image_flavours(96, 128)
    images = [photo_jpeg(96, 128, seed=k) for k in range(16)]
    for index, name in ((3, "png"), (5, "truncated"), (7, "bad_scan"), (9, "cmyk"), (12, "broken_progressive")):
        images[index] = flavours[name]
    return write_image_shards(tmp_path_factory.mktemp("flavours") / "shards", images)


def _run_skipping(path: Path, decode: str, worker_type: str, max_skips: int) -> tuple[list[Any], list[Any], Any]:
    """The batches; after each the resume state and the skips counted; the decode counts."""
    batches, states = [], []
    with _loader(path, decode, 2, worker_type, on_error="skip", max_skips=max_skips, batch_size=4) as loader:
        for batch in loader:
            batches.append((list(batch["__key__"]), batch["label"].clone(), batch["image"].clone()))
            states.append((loader.state_dict(), loader.skipped))
        return batches, states, loader.stats().decode.counts


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_the_skip_budget_counts_broken_images_as_with_cpu_decode(flavoured_shards: Path, worker_type: str) -> None:
    cpu, cpu_states, _ = _run_skipping(flavoured_shards, "cpu", worker_type, 2)
    device, device_states, counts = _run_skipping(flavoured_shards, "device", worker_type, 2)
    _assert_parity(cpu, device)
    # truncated: skipped in its worker; broken_progressive: skipped on the device side (no decoder takes it);
    # bad_scan: nvImageCodec's CPU backend recovers from it as Pillow does; png, cmyk: decoded in their workers.
    assert (counts.device, counts.worker, counts.host_retried, counts.failed) == (12, 2, 0, 1)
    assert device_states == cpu_states  # the resume state after every batch, skips included
    assert [skipped for _, skipped in device_states] == [0, 1, 1, 0]  # truncated; broken_progressive ends the epoch
    delivered = {key: image for keys, _, images in device for key, image in zip(keys, images)}
    expected = {key: image for keys, _, images in cpu for key, image in zip(keys, images)}
    for name in ("sample00003", "sample00009"):  # png, cmyk: the CPU path decoded them
        assert torch.equal(delivered[name], expected[name])
    assert level_difference(delivered["sample00007"], expected["sample00007"]) <= MAD_PER_IMAGE  # bad_scan
    for decode in ("cpu", "device"):
        with pytest.raises(SkipBudgetError):
            _run_skipping(flavoured_shards, decode, worker_type, 1)


def test_with_on_error_raise_a_broken_image_fails_its_batch_in_turn_as_with_cpu_decode(flavoured_shards: Path) -> None:
    outcomes: dict[str, list[Any]] = {}
    for decode in ("cpu", "device"):
        with _loader(flavoured_shards, decode, 2, "thread", batch_size=4) as loader:
            iterator, seen = iter(loader), []
            while True:
                try:
                    seen.append(list(next(iterator)["__key__"]))
                except StopIteration:
                    break
                except SampleError as err:  # raised in its turn; the pass goes on
                    seen.append(type(err).__name__)
            outcomes[decode] = seen
            stats = loader.stats().decode
    assert outcomes["device"] == outcomes["cpu"]
    assert outcomes["device"].count("SampleError") == 2  # batch 1 (truncated), batch 3 (broken_progressive)
    # Batch 1 failed in its worker (bad_scan with it); batches 0, 2 and 3 reached the device decoder.
    counts = stats.counts
    assert (counts.batches, counts.device, counts.worker, counts.failed) == (3, 9, 2, 1)
    assert counts.worker_reasons == {"png": 1, "cmyk": 1}


def test_the_device_transform_receives_the_decoded_batch(image_shards: Path) -> None:
    augment = Augment([RandomHorizontalFlip()], seed=4)
    with _loader(image_shards, "device", device_transform=augment) as loader:
        augmented = [batch["image"] for batch in loader]
    with _loader(image_shards, "device") as loader:
        expected = [augment(batch["image"], epoch=0, batch_index=position) for position, batch in enumerate(loader)]
    assert all(torch.equal(a, b) and a.dtype == torch.float32 for a, b in zip(augmented, expected))


def test_each_loader_decodes_with_its_own_decoder_and_closing_one_leaves_the_other(image_shards: Path,
                                                                                   cpu_run: list[Any]) -> None:
    first, second = _loader(image_shards, "device", 0), _loader(image_shards, "device", 0)
    with second:
        next(iter(first))
        first.close()  # releases the first loader's decoder only
        _assert_parity(cpu_run[:6], _read(second))


def test_auto_decodes_in_the_workers_off_cuda_as_before(image_shards: Path) -> None:
    with _loader(image_shards, "auto") as loader:
        assert loader.decode == "cpu" and "only where it is CUDA" in loader.stats().decode.reason
    without_device = DataLoader(_dataset(image_shards), batch_size=8, num_workers=0)
    assert without_device.decode == "cpu" and without_device.stats().decode.counts.device == 0


class _Stream(IterableDataset[Any]):
    can_defer_decode = True

    def __iter__(self) -> Any:
        return iter(())


@pytest.mark.parametrize(("options", "message"), [
    ({"device": None}, "needs 'device'"),
    ({"collate_fn": lambda batch: batch}, "a collate_fn was given"),
    ({"batch_size": None}, "needs batches"),
    ({"dataset_transform": None}, "does not declare can_defer_decode"),
    ({"dataset_transform": CenterCropDecode(8)}, None),
    ({"iterable": True}, "needs a map-style dataset"),
])
def test_decode_device_says_what_it_needs(image_shards: Path, options: dict[str, Any], message: str | None) -> None:
    dataset: Any = _Stream() if options.pop("iterable", False) else ShardDataset(
        image_shards, fields=("jpg",), transform=options.pop("dataset_transform", RandomResizedCropDecode(8)))
    kwargs = {"device": "cpu", "batch_size": 4, "num_workers": 0, **options}
    if message is None:
        assert DataLoader(dataset, decode="device", **kwargs).decode == "device"
        return
    with pytest.raises(ConfigError, match=message):
        DataLoader(dataset, decode="device", **kwargs)
    assert DataLoader(dataset, decode="auto", **kwargs).decode == "cpu"  # auto falls back, nothing breaks


def test_an_unknown_decode_mode_is_a_config_error(image_shards: Path) -> None:
    with pytest.raises(ConfigError, match="'decode' must be one of"):
        DataLoader(_dataset(image_shards), batch_size=4, decode="gpu")
