"""The runs of ``tools.bench.writers_bench`` (and of the device suite's ``shard_writers`` step): its raw inputs
(photos, a JSONL table of short documents, a BPE trained on it), one timed ``dataprep shard`` in a process of its
own (``time_shard``), and the hand-written baseline: a ``multiprocessing.Pool`` that decodes and re-encodes the
photos.

``make_rows``: ``rows`` JSON lines ``{"id": i, "text": ..., "score": ...}``, each text 3-120 words
(log-normal, median 30) drawn from ``dataprep.synthetic``'s words and made-up ones (Zipf
frequencies), so a byte-level BPE has real work; 1 row in 25 repeats the text of an earlier
row (duplicates across ranges, first in plan order wins), 1 in 50 has an empty text (a
reject for token output). Deterministic in the seed. ``pool_reencode``: what a user writes
by hand to shard images, ``Pool(N).imap`` over the files, each opened with Pillow,
converted to RGB and saved as a JPEG of quality 95 (dataprep's default); with ``wds``,
the parent writes the results into tar shards with ``webdataset.ShardWriter``.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from dataprep.synthetic import bpe_json
from dataprep.synthetic.vocab import WORDS
from tools.common.report import ToolError, machine_busy_s
from tools.common.synthetic import REPO_ROOT, make_raw_images

_SYLLABLES = ("ka", "ro", "mi", "te", "su", "an", "el", "or", "ix", "qu", "bra", "ste", "lon", "ver", "tho", "ing")
_VOCABULARY = 3000
_DUPLICATE_EVERY, _EMPTY_EVERY = 25, 50
_TRAIN_BYTES = 2_000_000
POOL_CHUNK = 8


@dataclass(frozen=True)
class Timed:
    """One timed run: its own seconds, inputs, CPU seconds (start-up included), the cores other processes kept busy
    meanwhile (None: unknown), how it shared its cores, the peak resident memory of its process and of its largest
    writer process (MiB, the summary's; None: unknown or none)."""

    seconds: float
    inputs: int
    cpu_s: float
    others_cores: float | None
    split: str = ""
    peak_mib: tuple[float | None, float | None] = (None, None)

    @property
    def rate(self) -> float:
        return self.inputs / max(self.seconds, 1e-9)


def time_shard(raw: Path, out: Path, workers: int, options: Sequence[str]) -> Timed:
    """``dataprep shard RAW OUT --workers W`` in a fresh process (module docstring); OUT removed after."""
    command = [sys.executable, "-m", "dataprep.cli", "shard", os.fspath(raw), os.fspath(out), "--workers",
               str(workers), "--json", "--no-progress", *options]
    before, busy, start = resource.getrusage(resource.RUSAGE_CHILDREN), machine_busy_s(), time.perf_counter()
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - start
    after, busy_after = resource.getrusage(resource.RUSAGE_CHILDREN), machine_busy_s()
    shutil.rmtree(out, ignore_errors=True)
    if done.returncode != 0:
        raise ToolError(f"dataprep shard {raw} --workers {workers} exited {done.returncode}: {done.stderr[-500:]}")
    summary = json.loads(done.stdout)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    others = None if busy is None or busy_after is None else max(busy_after - busy - cpu, 0.0) / wall
    split = summary.get("workers") or {}
    described = f"{split.get('writers')} x {split.get('threads_per_writer')}" if split else ""
    peak = summary.get("peak_rss_mib") or {}
    return Timed(seconds=float(summary["elapsed_s"]), inputs=int(summary["totals"]["inputs_seen"]), cpu_s=cpu,
                 others_cores=others, split=described, peak_mib=(peak.get("process"), peak.get("largest_writer")))


def make_photos(root: Path, photos: int) -> Path:
    """An image-folder tree of about ``photos`` synthetic photos under ``root`` (``make_raw_images``)."""
    return make_raw_images(root, photos)


def _vocabulary(rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    made_up = ["".join(rng.choice(_SYLLABLES, int(rng.integers(1, 4)))) for _ in range(_VOCABULARY)]
    words = [*WORDS, *made_up]
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    return words, np.cumsum(weights / weights.sum())


def make_rows(path: Path, rows: int, seed: int = 0) -> Path:
    """``rows`` JSON lines of short documents (module docstring), written to ``path``."""
    rng = np.random.default_rng(seed)
    words, cdf = _vocabulary(rng)
    lengths = np.clip(rng.lognormal(np.log(30), 0.7, rows), 3, 120).astype(int)
    picks = np.minimum(np.searchsorted(cdf, rng.random(int(lengths.sum()))), len(words) - 1)
    texts: list[str] = []
    start = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i, length in enumerate(lengths.tolist()):
            text = " ".join(words[k] for k in picks[start:start + length]).capitalize() + "."
            start += length
            if i % _EMPTY_EVERY == _EMPTY_EVERY - 1:
                text = ""
            elif i >= _DUPLICATE_EVERY and i % _DUPLICATE_EVERY == 0:
                text = texts[int(rng.integers(len(texts)))]
            else:
                texts.append(text)
            f.write(json.dumps({"id": i, "text": text, "score": round(float(rng.random()), 4)},
                               ensure_ascii=False) + "\n")
    return path


def make_bpe(rows: Path, out: Path) -> Path:
    """A byte-level BPE ``tokenizer.json`` trained on the first ~2 MB of the rows' text (``bpe_json``)."""
    texts: list[str] = []
    size = 0
    with open(rows, encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            size += len(texts[-1])
            if size >= _TRAIN_BYTES:
                break
    out.write_text(bpe_json(t for t in texts if t), encoding="utf-8")
    return out


def _reencode(path: str) -> tuple[str, bytes]:
    """What a user's worker does with one photo: decode, RGB, JPEG quality 95."""
    with Image.open(path) as image:
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, "JPEG", quality=95)
    return path, buffer.getvalue()


def pool_reencode(files: list[Path], workers: int, out: Path, *, wds: bool) -> tuple[float, int]:
    """(wall seconds, images) of ``Pool(workers).imap`` re-encoding every file, results written to tar shards by
    ``webdataset.ShardWriter`` in this process (``wds``) or only counted."""
    writer = _shard_writer(out) if wds else None
    names = [os.fspath(p) for p in files]
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for count, (path, data) in enumerate(pool.imap(_reencode, names, chunksize=POOL_CHUNK)):
            if writer is not None:
                writer.write({"__key__": f"{count:08d}", "jpg": data, "cls": Path(path).parent.name.encode()})
    if writer is not None:
        writer.close()
    return time.perf_counter() - start, len(names)


def _shard_writer(out: Path) -> Any:
    try:
        import webdataset
    except ImportError as err:
        raise ToolError("webdataset is not installed (pip install webdataset)") from err
    out.mkdir(parents=True, exist_ok=True)
    return webdataset.ShardWriter(os.fspath(out / "shard-%06d.tar"), maxsize=256 * 2**20, verbose=0)


def has_webdataset() -> bool:
    try:
        import webdataset  # noqa: F401
    except ImportError:
        return False
    return True
