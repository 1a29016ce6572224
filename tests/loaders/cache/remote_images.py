"""Image shards in the test S3 server, and the batches a loader reads from them, as comparable values.

- ``upload(folder, url)``: a dataprep output folder to a store URL with the real client, the manifest last.
- ``read_batches(dataset, ...)``: the batches a ``loaders.DataLoader`` yields over epochs, each batch
  as a list of ``(key, sha256 of the jpg bytes, cls)``: equal lists mean byte-identical batches.
- ``run_role(...)``: ``tests.loaders.cache.loader_roles`` in a fresh interpreter (a rank of a node).
- ``FolderWatch``: the largest size a folder reached while it ran (a hard bound checked at every moment).
- ``FAST``: client time-outs for tests (seconds, not minutes).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dataprep.remote import RemoteConfig, RemoteStore
from loaders import DataLoader
from loaders.cache import CacheConfig

ROOT = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 300  # a run takes seconds; only a hang gets near this
FAST = RemoteConfig(timeout_s=4.0, stall_s=1.0, connect_timeout_s=0.5, backoff_s=0.01, max_backoff_s=0.1)
Batch = list[tuple[str, str, int]]


def upload(folder: Path, url: str) -> None:
    """Every file of ``folder`` to ``url``; the manifest last, as dataprep writes it."""
    with RemoteStore(url) as store:
        for path in sorted(folder.iterdir()):
            if path.name != "manifest.json":
                store.put(path.name, path)
        store.put("manifest.json", folder / "manifest.json")


def cache_of(cache_dir: Path, limit: int | str = 64 << 20, **options: Any) -> CacheConfig:
    options.setdefault("remote", FAST)
    options.setdefault("timeout_s", 8.0)
    return CacheConfig(cache_dir, limit, **options)


def fingerprint(batch: dict[str, Any]) -> Batch:
    return [(str(k), hashlib.sha256(j).hexdigest(), int(c)) for k, j, c in zip(batch["__key__"], batch["jpg"],
                                                                               batch["cls"].tolist())]


def read_batches(dataset: Any, *, epochs: int = 2, batch_size: int = 4, seed: int = 5, num_workers: int = 0,
                 worker_type: str = "thread", context: str | None = None) -> list[list[Batch]]:
    """Per epoch, the batches ``DataLoader(dataset, shuffle=True)`` yields, fingerprinted."""
    found = []
    with DataLoader(dataset, batch_size=batch_size, shuffle=True, seed=seed, num_workers=num_workers,
                    worker_type=worker_type, multiprocessing_context=context) as loader:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            found.append([fingerprint(b) for b in loader])
    return found


def run_role(role: str, spec: dict[str, Any], *, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``python -m tests.loaders.cache.loader_roles ROLE SPEC`` (stdout piped, text)."""
    child_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "tests.loaders.cache.loader_roles", role, json.dumps(spec)],
                            cwd=ROOT, env=child_env, stdout=subprocess.PIPE, text=True)


def as_lists(batches: Sequence[Any]) -> list[Any]:
    """JSON's view of nested tuples (lists), for comparing with what a child wrote."""
    return json.loads(json.dumps(batches))


class FolderWatch:
    """Measures a folder as often as it can on a thread: the largest total seen, as sizes and as disk blocks."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.max_size = 0
        self.max_blocks = 0
        self.samples = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            size = blocks = 0
            for folder, dirs, files in os.walk(self.root):
                for name in [*dirs, *files]:
                    try:
                        st = os.lstat(os.path.join(folder, name))
                    except FileNotFoundError:
                        continue
                    size += st.st_size
                    blocks += st.st_blocks * 512
            self.max_size, self.max_blocks = max(self.max_size, size), max(self.max_blocks, blocks)
            self.samples += 1
            self._done.wait(0.001)

    def __enter__(self) -> FolderWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
