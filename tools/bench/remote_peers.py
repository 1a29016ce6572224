"""``remote_bench``'s peers, run in their own interpreter: MosaicML Streaming and LitData over the same samples.

``python -m tools.bench.remote_peers STEP SPEC`` (SPEC: JSON; prints one JSON line):

``prepare``  converts ``spec["samples"]`` (JSON lines: key, JPEG bytes as hex, class) into
    the peer's format in ``spec["work"]`` (MDS shards with ``streaming.MDSWriter``; LitData
    chunks with ``litdata.optimize``) and uploads them straight to the server under
    ``spec["prefix"]``.
``read``     streams ``spec["url"]`` through the proxy (the environment's endpoint) into a
    local cache ``spec["cache"]``, ``epochs`` times, with a shuffled torch DataLoader of
    ``workers`` processes running the same transform as the shardfeed rows; prints images/s
    per epoch.

Run with ``--peers-python``: the peers pin other torch and numpy versions than shardfeed's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch.utils.data

_SHARD = "8mb"


def _samples(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            yield {"key": doc["key"], "jpg": bytes.fromhex(doc["jpg"]), "cls": int(doc["cls"])}


def _identity(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def _write(spec: dict[str, Any]) -> Path:
    out = Path(spec["work"]) / "out"
    if spec["peer"] == "mosaicml-streaming":
        from streaming import MDSWriter

        with MDSWriter(out=str(out), columns={"key": "str", "jpg": "bytes", "cls": "int"}, size_limit=_SHARD) as w:
            for sample in _samples(spec["samples"]):
                w.write(sample)
    else:
        from litdata import optimize

        optimize(fn=_identity, inputs=list(_samples(spec["samples"])), output_dir=str(out), chunk_bytes="8MB",
                 num_workers=1)
    return out


def prepare(spec: dict[str, Any]) -> dict[str, Any]:
    import boto3

    out = _write(spec)
    client = boto3.client("s3", endpoint_url=spec["server"])
    files = sorted(p for p in out.rglob("*") if p.is_file())
    for path in files:
        client.upload_file(str(path), spec["bucket"], f"{spec['prefix']}/{path.relative_to(out).as_posix()}")
    return {"objects": len(files)}


class _Transformed(torch.utils.data.IterableDataset[dict[str, Any]]):
    """The peer's stream (its own shuffle and split among workers) with the shardfeed rows' transform."""

    def __init__(self, dataset: Any, decode: str) -> None:
        self.dataset = dataset
        # Imported here: the peers' interpreter loads only what a row needs (peer_run imports loaders).
        from tools.bench.peer_run import transform_for

        self.transform = transform_for(decode)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for sample in self.dataset:
            jpg = sample["jpg"]  # LitData gives an array of the bytes, Streaming the bytes
            out = {"__key__": str(sample["key"]), "jpg": jpg if isinstance(jpg, bytes) else bytes(np.asarray(jpg)),
                   "cls": int(sample["cls"])}
            if self.transform is None:
                yield out
            else:
                yield self.transform(out, np.random.default_rng(abs(hash(sample["key"]))))


def _dataset(spec: dict[str, Any]) -> Any:
    if spec["peer"] == "mosaicml-streaming":
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()  # its documented remedy for state a previous run left in shared memory
        return StreamingDataset(remote=spec["url"], local=spec["cache"], shuffle=True, batch_size=spec["batch_size"])
    from litdata import StreamingDataset as LitDataset

    return LitDataset(spec["url"], cache_dir=spec["cache"], shuffle=True,
                      storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})


def read(spec: dict[str, Any]) -> dict[str, Any]:
    # As their documentation reads them: the stream shuffles and splits itself among the workers.
    loader = torch.utils.data.DataLoader(_Transformed(_dataset(spec), spec["decode"]), batch_size=spec["batch_size"],
                                         num_workers=spec["workers"], persistent_workers=spec["workers"] > 0)
    found: dict[str, Any] = {}
    for epoch in range(spec["epochs"]):
        began, images = time.perf_counter(), 0
        for batch in loader:
            images += len(batch["__key__"])
        took = time.perf_counter() - began
        found.update({f"epoch{epoch + 1}_img_s": images / took, f"epoch{epoch + 1}_s": took})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.remote_peers", description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("prepare", "read"))
    parser.add_argument("spec", type=json.loads, help="the step's settings, one JSON object")
    args = parser.parse_args(argv)
    spec = args.spec
    try:
        result = prepare(spec) if args.step == "prepare" else read(spec)
    except Exception as err:  # noqa: BLE001 - reported to remote_bench, which shows it in its table
        result = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
