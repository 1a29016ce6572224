"""On CUDA (marked ``gpu``; skipped without CUDA or without an nvImageCodec CUDA backend that decodes here): the
decoder behind ``decode="auto"`` and each backend alone, their pixels against the CPU path, regions against whole
decodes, fallbacks counted, torch's memory given back.

nvJPEG's IDCT and colour upsampling are not libjpeg's: its pixels differ from the CPU path's by that as
well as by the block average (tests/loaders/batch_decode/test_device_decode.py). ``GPU_MAD_PER_IMAGE`` and
``GPU_MAD_ALL`` allow half a level more than the CPU backend's bounds; the device suite's decode step
records the measured values (``device_mad_mean``, per backend). Written to nvImageCodec 0.9's documented
API; not yet run on a GPU.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaders import Compose, DataLoader, DecodeLabel, RandomResizedCropDecode, ShardDataset
from loaders.batch_decode import (
    DecodeBackend,
    DeviceDecode,
    NvImageCodecDecoder,
    device_decoder_problem,
    pack_encoded,
)
from loaders.batch_decode.decoders import CUDA_BACKENDS, backend_problem
from loaders.read.decode_plan import planning
from tests.loaders.batch_decode.test_device_decode import MAD_ALL, MAD_PER_IMAGE, TRANSFORMS, _photos
from tests.loaders.helpers import image_flavours, level_difference, write_image_shards
from tests.samples import photo_jpeg

GPU_MAD_PER_IMAGE = MAD_PER_IMAGE + 0.5
GPU_MAD_ALL = MAD_ALL + 0.5


def _cuda_problem() -> str | None:
    if not torch.cuda.is_available():
        return "needs CUDA"
    problem = device_decoder_problem(torch.device("cuda"))
    return None if problem is None else f"no nvImageCodec CUDA backend here: {problem}"


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_cuda_problem() is not None, reason=str(_cuda_problem()))]


def _gpu_and_cpu(name: str, backend: DecodeBackend, *, regions: bool = True,
                 fallback: bool = True) -> tuple[list[np.ndarray], torch.Tensor]:
    """The CPU path's images and ``backend``'s batch on CUDA for ``_photos(18)`` under transform ``name``
    (skipped where ``backend`` alone decodes nothing on this GPU: no JPEG engine, say)."""
    problem = backend_problem(torch.device("cuda", torch.cuda.current_device()), backend)
    if problem is not None:
        pytest.skip(f"the {backend.value} backend does not decode here: {problem}")
    transform, photos = TRANSFORMS[name](), _photos(18)
    samples = [{"__key__": f"k{i}", "__index__": i, "jpg": data} for i, data in enumerate(photos)]
    cpu = [transform(dict(s), np.random.default_rng(i))["image"] for i, s in enumerate(samples)]
    with planning():
        plans = [transform(dict(s), np.random.default_rng(i))["image"] for i, s in enumerate(samples)]
    device = torch.device("cuda", torch.cuda.current_device())
    encoded = pack_encoded(plans, lambda shape, dtype: torch.empty(shape, dtype=dtype, pin_memory=True))
    decoder = DeviceDecode(device, NvImageCodecDecoder(device, backend, fallback=fallback), regions=regions)
    try:
        out, failures = decoder.decode_field(encoded)
    finally:
        decoder.close()
    assert failures == [] and out.device.type == "cuda" and out.dtype == torch.uint8
    return cpu, out


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_each_backend_gives_the_cpu_paths_pixels_within_the_gpu_tolerance(name: str, backend: DecodeBackend) -> None:
    cpu, out = _gpu_and_cpu(name, backend)  # with the backends after it for what it cannot take
    mads = [level_difference(c, d) for c, d in zip(cpu, out.cpu().numpy())]
    assert max(mads) <= GPU_MAD_PER_IMAGE, mads
    assert np.mean(mads) <= GPU_MAD_ALL, mads


@pytest.mark.parametrize("backend", CUDA_BACKENDS)
def test_a_region_decodes_to_nearly_the_whole_images_pixels_on_the_gpu(backend: DecodeBackend) -> None:
    _, windowed = _gpu_and_cpu("random_crop_224", backend)
    _, whole = _gpu_and_cpu("random_crop_224", backend, regions=False)
    # nvJPEG's ROI decode may upsample chroma differently on a region's one-pixel edge (nvImageCodec's notes).
    mads = [level_difference(a, b) for a, b in zip(windowed.cpu().numpy(), whole.cpu().numpy())]
    assert max(mads) <= 0.5, mads


@pytest.fixture(scope="module")
def mixed_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 photos, the one at 4 a PNG and the one at 9 a CMYK JPEG."""
    flavours = image_flavours(240, 320)
    images = [photo_jpeg(240 + 8 * k, 320, seed=k) for k in range(24)]
    images[4], images[9] = flavours["png"], flavours["cmyk"]
    return write_image_shards(tmp_path_factory.mktemp("cuda_decode") / "shards", images)


def _read(path: Path, device: str, decode: str) -> tuple[list[Any], Any]:
    dataset = ShardDataset(path, fields=("jpg", "cls"), seed=1,
                           transform=Compose([RandomResizedCropDecode(64), DecodeLabel()]))
    with DataLoader(dataset, batch_size=8, num_workers=2, device=device, decode=decode, seed=3) as loader:
        assert loader.decode == ("device" if device == "cuda" else "cpu")
        batches = [(list(b["__key__"]), b["image"].cpu()) for b in loader]
        return batches, loader.stats().decode


def test_auto_decodes_on_the_gpu_counts_fallbacks_and_gives_its_memory_back(mixed_shards: Path) -> None:
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    cpu, _ = _read(mixed_shards, "cpu", "cpu")
    gpu, stats = _read(mixed_shards, "cuda", "auto")
    assert stats.mode == "device" and stats.decoder is not None and stats.decoder.startswith("nvImageCodec 0.")
    assert (stats.counts.device, stats.counts.worker) == (22, 2)
    assert stats.counts.worker_reasons == {"png": 1, "cmyk": 1}
    assert [keys for keys, _ in gpu] == [keys for keys, _ in cpu]
    mads = [level_difference(a, b) for (_, x), (_, y) in zip(cpu, gpu) for a, b in zip(x, y)]
    assert max(mads) <= GPU_MAD_PER_IMAGE and np.mean(mads) <= GPU_MAD_ALL
    del gpu
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == baseline  # nothing of the loader's decode stays in torch's memory
