"""Programs the remote-loader tests run as separate processes: a rank of a node, a run to kill mid-epoch.

``python -m tests.loaders.cache.loader_roles ROLE SPEC`` (SPEC: JSON):

``epochs``  one rank reading ``spec["url"]`` through the node cache in ``spec["cache_dir"]`` with a
    ``loaders.DataLoader`` (``workers`` workers of ``worker_type``, ``context`` fork or spawn) for
    ``epochs`` epochs; writes ``{"batches": [...]}`` (fingerprinted, see ``remote_images``) to ``out``.
    The topology is explicit when ``spec["rank"]`` is given, else read from the environment
    (RANK / WORLD_SIZE, as a launcher sets them).
``stop``    reads epoch 0; after each batch saves the loader's state to ``state`` (atomically) and the
    batches so far to ``out``; after ``stop_after`` batches prints ``ready`` and waits (the test kills it).

``spec["patient"]``: the client waits out stalled bodies (``PATIENT``) instead of re-requesting them after a
second, so that a download the test's proxy holds stays partial until the kill.

The environment (credentials, ``AWS_ENDPOINT_URL``) comes from the test.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from dataprep.remote import RemoteConfig
from loaders import DataLoader
from loaders.read.datasets import ShardDataset
from loaders.read.topology import Topology
from tests.loaders.cache.remote_images import cache_of, fingerprint, read_batches

_BLOCK_S = 3600.0  # the ``stop`` role waits this long for its kill
PATIENT = RemoteConfig(timeout_s=600.0, stall_s=300.0)  # a held body is waited for, not fetched again


def _dataset(spec: dict[str, Any]) -> ShardDataset:
    topology = None
    if spec.get("rank") is not None:
        topology = Topology(rank=spec["rank"], world_size=spec["world_size"], local_rank=spec["rank"],
                            local_world_size=spec["world_size"])
    options = dict(spec.get("cache_options", {}))
    if spec.get("patient"):
        options["remote"] = PATIENT
    cache = cache_of(Path(spec["cache_dir"]), spec["limit"], **options)
    return ShardDataset(spec["url"], fields=("jpg", "cls"), cache=cache, topology=topology)


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def run_epochs(spec: dict[str, Any]) -> int:
    batches = read_batches(_dataset(spec), epochs=spec.get("epochs", 1), batch_size=spec["batch_size"],
                           seed=spec["seed"], num_workers=spec["workers"], worker_type=spec["worker_type"],
                           context=spec.get("context"))
    _write(Path(spec["out"]), {"batches": batches})
    return 0


def run_stop(spec: dict[str, Any]) -> int:
    state_path = Path(spec["state"])
    seen = []
    loader = DataLoader(_dataset(spec), batch_size=spec["batch_size"], shuffle=True, seed=spec["seed"],
                        num_workers=spec["workers"], worker_type=spec["worker_type"])
    for batch in loader:
        seen.append(fingerprint(batch))
        tmp = state_path.with_name(state_path.name + ".tmp")
        torch.save(loader.state_dict(), tmp)
        os.replace(tmp, state_path)
        _write(Path(spec["out"]), {"batches": seen})
        if len(seen) == spec["stop_after"]:
            print("ready", flush=True)
            time.sleep(_BLOCK_S)
    return 1  # the test kills this process before the epoch ends


def main(argv: list[str]) -> int:
    role, spec = argv[0], json.loads(argv[1])
    if role == "epochs":
        return run_epochs(spec)
    if role == "stop":
        return run_stop(spec)
    raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
