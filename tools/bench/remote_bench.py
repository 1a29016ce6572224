"""Remote shards through the node cache vs the local disk: ``python -m tools.bench.remote_bench``.

The same tar shards (``--shards DIR``, or synthetic photos sharded here) are read, in one
run, from the local disk and from a local S3 server (moto) through the tests' fault proxy
with the node's link capped at each of ``--caps`` (MB/s, 0 = uncapped), by
``loaders.DataLoader`` over ``ShardDataset`` with the same order (blocks of one shard),
seed and transform. Per row: images/s of epoch 1 (cold cache) and epoch 2, bytes the node
downloaded (counted at the proxy), read stalls after warm-up (opens that waited for a
download, after the first ``--warmup-shards`` shards' worth of batches; the target is 0
when the cap exceeds what the loader consumes), and the cost of hashing while streaming
(sha256 at this core's measured rate over the bytes downloaded, as a share of epoch 1).

With ``--peers-python PATH`` (an interpreter where ``pip install mosaicml-streaming litdata``
worked: they pin other torch and numpy versions than shardfeed's, so they live in a venv of
their own), MosaicML Streaming and LitData read the same samples (converted to MDS and to
LitData's chunks, uploaded to the same server) through the same proxy and cap, with the
same transform, in a torch DataLoader: ``tools.bench.remote_peers``. Their interpreter::

    python3 -m venv .venv-peers && .venv-peers/bin/pip install mosaicml-streaming litdata boto3
    .venv-peers/bin/pip uninstall -y obstore   # if present, see below

(in shardfeed's own venv, pip replaces its torch, numpy and Pillow-SIMD). Streaming imports
torchvision at import, so torch and torchvision must match (pip's own choice, torch 2.14.1 +
torchvision 0.29.1, does; the CPU torch 2.13 wheel with PyPI's torchvision 0.28 does not:
``torchvision::nms does not exist``). LitData 0.2.76 downloads through obstore when it is
installed, with client options that refuse an ``http://`` endpoint (``BadScheme``: no
``allow_http``); without obstore it reads through boto3, which takes the local server.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tools.bench.peer_run import transform_for
from tools.common.report import ToolError, add_output_args, emit, format_table
from tools.common.synthetic import REPO_ROOT, make_raw_images

MB = 1_000_000
PEERS = ("mosaicml-streaming", "litdata")


def _shards(args: argparse.Namespace, tmp: Path) -> Path:
    if args.shards:
        return Path(args.shards)
    from dataprep.cli import main as dataprep_main

    raw = make_raw_images(tmp / "raw", args.images)
    out = tmp / "shards"
    with contextlib.redirect_stdout(io.StringIO()):  # dataprep's summary is not this tool's table
        code = dataprep_main(["shard", str(raw), str(out), "--resize-short", "256", "--shard-size", args.shard_size,
                              "--workers", "1"])
    if code != 0:
        raise ToolError(f"dataprep shard failed ({code})")
    return out


def _epochs(dataset: Any, args: argparse.Namespace, warmup_batches: int) -> dict[str, Any]:
    """Images/s per epoch and, through the cache, its stalls after ``warmup_batches`` of epoch 1."""
    from loaders import DataLoader

    stats = dataset.files.cache.stats if dataset.files.batched else None
    seconds, images_read, stalls_at = [], [], None
    loader: DataLoader[Any]
    with DataLoader(dataset, batch_size=args.batch_size, shuffle=True, seed=0, num_workers=args.workers,
                    worker_type="thread") as loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            began, images = time.perf_counter(), 0
            for position, batch in enumerate(loader):
                images += len(batch["__key__"])
                if epoch == 0 and position + 1 == warmup_batches and stats is not None:
                    stalls_at = (stats.stalls, stats.stall_s)
            seconds.append(time.perf_counter() - began)
            images_read.append(images)
    row: dict[str, Any] = {}
    for e, (took, images) in enumerate(zip(seconds, images_read)):
        row.update({f"epoch{e + 1}_img_s": images / took, f"epoch{e + 1}_s": took})
    if stats is not None and stalls_at is not None:
        row.update(stalls_after_warmup=stats.stalls - stalls_at[0], stall_s_after_warmup=stats.stall_s - stalls_at[1])
    return row


def _sha256_mib_s() -> float:
    data = os.urandom(64 << 20)
    best = 0.0
    for _ in range(3):
        began = time.perf_counter()
        hashlib.sha256(data).digest()
        best = max(best, len(data) / (1 << 20) / (time.perf_counter() - began))
    return best


def _ours(args: argparse.Namespace, site: Any, folder: Path, tmp: Path) -> list[dict[str, Any]]:
    from loaders import ShardDataset
    from loaders.cache import CacheConfig

    transform = transform_for(args.decode)
    data_bytes = sum(p.stat().st_size for p in folder.iterdir())
    limit = args.cache_limit or 2 * data_bytes + (64 << 20)
    probe = ShardDataset(folder, fields=("jpg", "cls"), order="blocks")
    block = int(statistics.median(s.num_samples for s in probe.shards.manifest.shards))
    warmup = max(1, args.warmup_shards * block // args.batch_size)
    rows = [{"row": "local disk", "cap_mb_s": None,
             **_epochs(ShardDataset(folder, fields=("jpg", "cls"), order="blocks", block_size=block,
                                    transform=transform), args, warmup)}]
    site.upload(folder, "ours")
    for cap in args.caps:
        site.set_link(cap * MB if cap else None)
        site.reset_counters()
        cache = CacheConfig(tmp / f"cache-{cap}", limit)
        dataset = ShardDataset(site.url("ours"), fields=("jpg", "cls"), transform=transform, cache=cache)
        row = {"row": "shardfeed cache", "cap_mb_s": cap or None, **_epochs(dataset, args, warmup)}
        row["downloaded_mb"] = site.body_bytes("ours") / MB
        dataset.close()
        rows.append(row)
    site.set_link(None)
    return rows


def _peers(args: argparse.Namespace, site: Any, folder: Path, tmp: Path) -> list[dict[str, Any]]:
    """The peers' rows, each read in ``args.peers_python`` (``tools.bench.remote_peers``); failures become notes."""
    samples = tmp / "samples.jsonl"
    _export_samples(folder, samples)
    rows = []
    for peer in PEERS:
        spec = {"peer": peer, "samples": str(samples), "work": str(tmp / peer), "url": site.url(peer),
                "server": site.server_url, "bucket": site.bucket, "prefix": peer, "epochs": args.epochs,
                "batch_size": args.batch_size, "workers": args.workers, "decode": args.decode}
        prepared = _peer_call(args.peers_python, "prepare", spec)
        if "error" in prepared:
            rows.append({"row": peer, "note": prepared["error"]})
            continue
        for cap in args.caps:
            site.set_link(cap * MB if cap else None)
            site.reset_counters()
            got = _peer_call(args.peers_python, "read", {**spec, "cache": str(tmp / f"{peer}-cache-{cap}")})
            row = {"row": peer, "cap_mb_s": cap or None, **{k: v for k, v in got.items() if k != "error"}}
            row["downloaded_mb"] = site.body_bytes(peer) / MB
            if "error" in got:
                row["note"] = got["error"]
            rows.append(row)
    site.set_link(None)
    return rows


def _peer_call(python: str, step: str, spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run([python, "-m", "tools.bench.remote_peers", step, json.dumps(spec)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return {"error": f"{step} failed: {tail[0][:300]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _export_samples(folder: Path, path: Path) -> None:
    """Every sample's key, JPEG bytes (hex) and class, one JSON line each: what the peers convert."""
    from loaders import ShardDataset

    dataset = ShardDataset(folder, fields=("jpg", "cls"), order="sequential")
    with open(path, "w", encoding="utf-8") as out:
        for i in range(len(dataset)):
            sample = dataset[i]
            out.write(json.dumps({"key": sample["__key__"], "jpg": sample["jpg"].hex(), "cls": sample["cls"]}) + "\n")


def _table(rows: list[dict[str, Any]], hash_mib_s: float) -> str:
    headers = ["reader", "cap MB/s", "epoch 1 img/s", "epoch 2 img/s", "downloaded MB", "stalls", "stall s",
               "hash % of epoch 1"]
    cells = []
    for r in rows:
        hashed = None
        if r.get("downloaded_mb") and r.get("epoch1_s") and r["row"] == "shardfeed cache":
            hashed = 100 * (r["downloaded_mb"] * MB / (1 << 20) / hash_mib_s) / r["epoch1_s"]
        cells.append([r["row"], r.get("cap_mb_s"), r.get("epoch1_img_s"), r.get("epoch2_img_s"),
                      r.get("downloaded_mb"), r.get("stalls_after_warmup"), r.get("stall_s_after_warmup"), hashed])
    notes = [f"note: {r['row']}: {r['note']}" for r in rows if r.get("note")]
    return "\n".join([format_table(headers, cells, title="remote shards vs local disk"), *notes,
                      f"sha256 on one core: {hash_mib_s:,.0f} MiB/s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.remote_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--shards", help="a dataprep tar-shard folder (default: synthetic photos, sharded here)")
    parser.add_argument("--images", type=int, default=2000, help="synthetic photos to make (without --shards)")
    parser.add_argument("--shard-size", default="8MB", help="shard size of the synthetic shards")
    parser.add_argument("--caps", type=lambda s: [float(x) for x in s.split(",")], default=[20.0, 50.0, 0.0],
                        help="link caps in MB/s, comma-separated; 0 = uncapped")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--decode", choices=("pil", "fused", "none"), default="pil",
                        help="the transform every row runs (pil: the peers' PIL crop; fused: ours)")
    parser.add_argument("--cache-limit", type=int, default=0, help="bytes (default: twice the data)")
    parser.add_argument("--warmup-shards", type=int, default=2, help="stalls are counted after this many shards")
    parser.add_argument("--peers-python", help="an interpreter with mosaicml-streaming and litdata")
    add_output_args(parser, plot=None)
    args = parser.parse_args(argv)
    from tools.bench.remote_site import Site

    with tempfile.TemporaryDirectory(prefix="remote_bench-") as name, Site() as site:
        tmp = Path(name)
        folder = _shards(args, tmp)
        hash_mib_s = _sha256_mib_s()
        rows = _ours(args, site, folder, tmp)
        if args.peers_python:
            rows += _peers(args, site, folder, tmp)
    data = {"rows": rows, "sha256_mib_s": hash_mib_s, "shards": str(args.shards or "synthetic"),
            "caps_mb_s": args.caps, "decode": args.decode, "workers": args.workers, "batch_size": args.batch_size}
    emit("remote_bench", _table(rows, hash_mib_s), data, args.json, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
