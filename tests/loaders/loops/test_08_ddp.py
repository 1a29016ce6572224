"""Loop 8 of the black-box tests of ``loaders.DataLoader`` under the loops real training code writes:
DDP with 2 gloo ranks.
(public API only; the oracle: the stock DataLoader for drop-in promises, the uninterrupted run for resume).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

# ---------------------------------------------------------------------------------------------
# 8. DDP with 2 gloo ranks, each script seeding torch with its own rank (no seed=), the user's own
#    DistributedSampler: disjoint, complete epochs; a resume on both ranks gives the remaining batches.
# ---------------------------------------------------------------------------------------------

DDP_SCRIPT = r"""
import json, sys, torch, torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler
rank, init, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
torch.manual_seed(100 + rank)
from loaders import DataLoader
class R(Dataset):
    def __len__(self): return 12
    def __getitem__(self, i): return torch.tensor(i)
def make():
    sampler = DistributedSampler(R(), shuffle=True)
    return sampler, DataLoader(R(), batch_size=2, sampler=sampler, num_workers=0, worker_type="thread")
sampler, loader = make()
full = []
for e in range(2):
    sampler.set_epoch(e)
    full.append([b.tolist() for b in loader])
sampler, part = make()
sampler.set_epoch(1)
it = iter(part)
head = [next(it).tolist()]
state = part.state_dict()
sampler, again = make()
again.load_state_dict(state)
sampler.set_epoch(1)
rest = [b.tolist() for b in again]
plain = DataLoader(R(), batch_size=2, shuffle=True, num_workers=0)
json.dump({"full": full, "resumed": head + rest, "plain": [b.tolist() for b in plain]}, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_ddp_two_ranks_without_seed_are_disjoint_and_resume(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    script = tmp_path / "rank.py"
    script.write_text(DDP_SCRIPT)
    init = f"file://{tmp_path / 'rendezvous'}"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(tmp_path / f"r{r}.json")], env=env)
             for r in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    res = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        r0 = [x for b in res[0]["full"][epoch] for x in b]
        r1 = [x for b in res[1]["full"][epoch] for x in b]
        assert not set(r0) & set(r1), f"epoch {epoch}: ranks overlap"
        assert sorted(r0 + r1) == list(range(12))
    for r in range(2):
        assert res[r]["resumed"] == res[r]["full"][1]
    # no sampler given, no seed=: a plain dataset is not split (as stock), and every rank draws the same order
    assert res[0]["plain"] == res[1]["plain"]
