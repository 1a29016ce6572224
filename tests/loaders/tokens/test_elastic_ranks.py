"""Elastic resume with real ranks: separate processes that learn their rank from RANK / WORLD_SIZE, as torchrun sets.

A job of 2 ranks x 3 sequences reads some steps and its rank 1 saves the loader state to a
file (``torch.save``); a job of 3 ranks x 2 sequences (same global batch) loads that file on
every rank and reads on: together they read exactly the global batches of the uninterrupted
run, every rank the same number. Each rank writes its batches' tokens to JSON; the checks run
here. This file is also the rank's program: ``python test_elastic_ranks.py rank ARGS``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

RUN_TIMEOUT_S = 180  # a job takes seconds; only a hang gets near this
REPO = Path(__file__).resolve().parents[3]


def _rank_main(shards: str, batch_size: int, steps: int, state_in: str, state_out: str, out: str) -> None:
    """One rank: read ``steps`` batches (-1: the rest of the epoch), then save (rank W-1) and write its batches."""
    import torch

    from loaders import DataLoader, Topology, TokenDataset

    topology = Topology.detect()  # from RANK / WORLD_SIZE
    dataset = TokenDataset(shards, seq_len=8, seed=5)  # no topology given: the loader detects it too
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=1, seed=0)
    if state_in:
        loader.load_state_dict(torch.load(state_in, weights_only=True))
    rows: list[list[int]] = []
    for step, batch in enumerate(loader):
        inputs, labels = batch["input_ids"].numpy().astype(np.int64), batch["labels"].numpy().astype(np.int64)
        rows.append([np.append(inputs[i], labels[i, -1]).tolist() for i in range(inputs.shape[0])])
        if step + 1 == steps:
            break
    if state_out and topology.rank == topology.world_size - 1:
        torch.save(loader.state_dict(), state_out)
    Path(out).write_text(json.dumps({"rank": topology.rank, "len": len(loader), "batches": rows}))
    loader.close()


def _job(world_size: int, batch_size: int, steps: int, shards: Path, tmp: Path, *, state_in: str = "",
         state_out: str = "") -> list[dict[str, Any]]:
    """Run ``world_size`` rank processes at once; what each wrote, by rank."""
    procs = []
    for rank in range(world_size):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "PYTHONPATH": str(REPO)}
        out = tmp / f"w{world_size}-rank{rank}.json"
        args = [sys.executable, __file__, "rank", str(shards), str(batch_size), str(steps), state_in, state_out,
                str(out)]
        procs.append((subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True), out))
    results = []
    for proc, out in procs:
        _, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        assert proc.returncode == 0, f"rank exited {proc.returncode}:\n{err[-3000:]}"
        results.append(json.loads(out.read_text()))
    return sorted(results, key=lambda r: r["rank"])


def _steps(results: list[dict[str, Any]], sequence_of: dict[bytes, int]) -> list[list[int]]:
    per_rank = [[[sequence_of[np.asarray(row, dtype=np.int64).tobytes()] for row in batch] for batch in r["batches"]]
                for r in results]
    assert len({len(batches) for batches in per_rank}) == 1, [len(b) for b in per_rank]
    return [sorted(s for rows in step for s in rows) for step in zip(*per_rank)]


def test_two_rank_processes_save_and_three_resume(counting_shards: Path, tmp_path: Path) -> None:
    from loaders.tokens import SampleIndex, TokenDataset
    from tests.loaders.tokens.ranks import grid, window_key

    dataset = TokenDataset(counting_shards, seq_len=8, seed=5)
    sequence_of = {}
    for k in range(len(dataset)):
        item = dataset[SampleIndex(k, 0)]
        sequence_of[window_key(item["input_ids"], item["labels"])] = k
    state = tmp_path / "state.pt"
    saved = _job(2, 3, 9, counting_shards, tmp_path, state_out=str(state))
    resumed = _job(3, 2, -1, counting_shards, tmp_path, state_in=str(state))
    assert {r["len"] for r in saved} == {r["len"] for r in resumed} == {len(dataset) // 6}
    assert _steps(saved, sequence_of) + _steps(resumed, sequence_of) == list(grid(0, len(dataset), 6))


if __name__ == "__main__" and sys.argv[1:2] == ["rank"]:
    _rank_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7])
