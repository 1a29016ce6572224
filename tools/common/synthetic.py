"""Synthetic data for the benchmarks, the GPU programs and the suites: raw image trees
(``dataprep.synthetic``'s photos) and their shards.

Two kinds of photo trees: ``make_raw_images`` (``dataprep.synthetic``'s ImageNet-like size mix:
80% about 500x375, 10% 1024x768, 10% 320x240) and ``make_uniform_images`` (every photo about
500x375, the same content and JPEG quality draw), named for ``tools.bench.peer_bench --photos`` in
``PHOTO_KINDS``.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from PIL import Image

from tools.common.report import ToolError

# The checkout's root: ``-m dataprep.cli`` resolves from there wherever a tool was started.
REPO_ROOT = Path(__file__).resolve().parents[2]


def make_raw_images(root: Path, images: int, *, classes: int = 10) -> Path:
    """An image-folder tree of about ``images`` synthetic ImageNet-like photos under
    ``root``: ``dataprep.synthetic`` trees made by up to one child process per core, merged,
    keeping only colour JPEGs with plain names (its PNG, grey, CMYK and odd-name variants
    test cleaning, not speed, and an older Pillow or nvJPEG may refuse some of them)."""
    from loaders import cpus_available

    # Each chunk begins with 12 special variants (PNG, grey, CMYK...): 256 images or more
    # per chunk keeps them under 5 % of an ImageNet-like set.
    chunks = max(1, min(cpus_available(), images // 256))
    per = [images // chunks + (1 if k < images % chunks else 0) for k in range(chunks)]
    code = ("import sys; from dataprep.synthetic import make_image_tree; "
            "make_image_tree(sys.argv[1], images=int(sys.argv[2]), classes=int(sys.argv[3]), seed=int(sys.argv[4]), "
            "broken=False, sidecars=False)")
    children = [subprocess.Popen([sys.executable, "-c", code, os.fspath(root / f"gen-{k}"), str(n),
                                  str(min(classes, n)), str(k)], cwd=REPO_ROOT, stderr=subprocess.PIPE)
                for k, n in enumerate(per)]
    for k, child in enumerate(children):
        _, err = child.communicate()
        if child.returncode != 0:
            raise ToolError(f"making synthetic images (chunk {k}) failed: {err.decode(errors='replace')[-300:]}")
    merged = root / "images"
    for k in range(chunks):
        for path in sorted((root / f"gen-{k}").rglob("*")):
            if path.is_file() and path.suffix == ".jpg" and path.name.isascii() and rgb_jpegs([path.read_bytes()]):
                target = merged / path.parent.name / f"g{k}-{path.name}"
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
        shutil.rmtree(root / f"gen-{k}")
    return merged


MIXED, UNIFORM = "mixed", "500x375"
PHOTO_KINDS = {
    MIXED: "dataprep.synthetic's ImageNet-like size mix (80% ~500x375, 10% 1024x768, 10% 320x240)",
    UNIFORM: "every photo ~500x375 (long side 470-500, 70% landscape), as issue 20's benchmark",
}
_UNIFORM_SEED = 7  # not dataprep.synthetic's seeds: other photos than the mixed tree's


def make_uniform_images(root: Path, images: int, *, classes: int = 10) -> Path:
    """An image-folder tree of exactly ``images`` photo-like JPEGs of about 500x375 (either way) under
    ``root``/images: ``dataprep.synthetic``'s photo content and JPEG quality draw (87-96), baseline
    4:2:0, written by up to one child process per core. Deterministic in ``images``."""
    from loaders import cpus_available

    chunks = max(1, min(cpus_available(), images // 64))
    bounds = [images * k // chunks for k in range(chunks + 1)]
    code = ("import sys; from pathlib import Path; from tools.common.synthetic import write_uniform_photos; "
            "write_uniform_photos(Path(sys.argv[1]), range(int(sys.argv[2]), int(sys.argv[3])), int(sys.argv[4]))")
    out = root / "images"
    children = [subprocess.Popen([sys.executable, "-c", code, os.fspath(out), str(bounds[k]), str(bounds[k + 1]),
                                  str(classes)], cwd=REPO_ROOT, stderr=subprocess.PIPE) for k in range(chunks)]
    for k, child in enumerate(children):
        _, err = child.communicate()
        if child.returncode != 0:
            raise ToolError(f"making 500x375 photos (chunk {k}) failed: {err.decode(errors='replace')[-300:]}")
    return out


def write_uniform_photos(out: Path, indices: Iterable[int], classes: int) -> None:
    """Write photo ``i`` of ``make_uniform_images`` for each i in ``indices``: ``out/class_KK/img_IIIII.jpg``."""
    import numpy as np

    from dataprep.synthetic.photos import encode_jpeg, photo_like

    for index in indices:
        rng = np.random.default_rng([_UNIFORM_SEED, index])
        long_side = int(rng.integers(470, 501))  # dataprep.synthetic's ~500x375 draw
        short_side = int(round(long_side * rng.uniform(0.7, 0.8)))
        height, width = (short_side, long_side) if rng.random() < 0.7 else (long_side, short_side)
        path = out / f"class_{index % classes:02d}" / f"img_{index:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_jpeg(photo_like(height, width, rng), rng))


def rgb_jpegs(datas: Iterable[bytes]) -> list[bytes]:
    """The colour (3-component) JPEGs of ``datas``: the synthetic tree's grey and CMYK
    variants test cleaning, not decode speed, and nvJPEG may refuse CMYK."""
    kept = []
    for data in datas:
        with Image.open(io.BytesIO(data)) as img:
            if img.format == "JPEG" and img.mode == "RGB":
                kept.append(data)
    return kept


def shard(raw: Path, out: Path, *, resize_short: int | None = None) -> Path:
    """``python -m dataprep.cli shard RAW OUT`` (every core; pre-resized when asked): OUT."""
    command = [sys.executable, "-m", "dataprep.cli", "shard", os.fspath(raw), os.fspath(out), "--shard-size", "64MB",
               "--no-progress"]
    if resize_short is not None:
        command += ["--resize-short", str(resize_short)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolError(f"dataprep shard {raw} {out} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return out


def make_shards(root: Path, images: int, side: int) -> Path:
    """``images`` synthetic raw images (``dataprep.synthetic.make_dataset``) under ``root``/raw,
    sharded into ``root``/shards pre-resized for crops of ``side`` pixels (short side about 8/7 of it)."""
    from dataprep.synthetic import SyntheticSpec, make_dataset

    raw = root / "raw"
    spec = SyntheticSpec(images=images, classes=10, seed=0, broken=False, tables=False, text=False, sidecars=False)
    make_dataset(raw, spec)
    return shard(raw / "images", root / "shards", resize_short=max(side + side // 7, 32))
