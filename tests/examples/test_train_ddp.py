"""examples/train_ddp.py under real torchrun, 2 gloo processes on the CPU: the job is killed once a
checkpoint exists and resumed on 1 process; every sample of the epoch is trained on exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from loaders import ShardDataset
from tests.examples.helpers import EXAMPLES, load_example
from tests.samples import image_dataset

REPO = EXAMPLES.parent
HANG_S = 180  # a run takes seconds; only a hang gets near this
# 64 samples, 4 per process per step: 8 steps per epoch on 2 processes, 16 on 1. Checkpoints every 3 steps
# and at step 23 never fall on an epoch's end (3 and 23 share no multiple with 8 below 24): every state
# the kill can leave is mid-epoch.
IMAGES, BATCH, EVERY, STEPS = 64, 4, 3, 23
COMMON = ["--batch-size", str(BATCH), "--image-size", "16", "--workers", "1", "--checkpoint-every", str(EVERY)]


@pytest.fixture(scope="module")
def ddp_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return image_dataset(tmp_path_factory.mktemp("train-ddp"), IMAGES, classes=4, per_shard=16,
                         resize_short=24).shards


def _torchrun(nproc: int, *args: str) -> subprocess.Popen[str]:
    """``torchrun --standalone --nproc_per_node NPROC examples/train_ddp.py ARGS`` on loopback."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(EXAMPLES / "train_ddp.py"), *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _steps_logged(folder: Path) -> dict[int, list[dict[str, Any]]]:
    """rank -> its logged steps, whole lines only (a kill may cut the last one)."""
    out = {}
    for path in sorted(folder.glob("rank-*.jsonl")):
        text = path.read_text()
        lines = text.splitlines()[: text.count("\n")]
        out[int(path.stem.split("-")[1])] = [json.loads(line) for line in lines]
    return out


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until ``path`` exists (the event the kill waits for), or the job ends."""
    deadline = time.monotonic() + HANG_S
    while not path.exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.005)


def test_a_job_killed_after_a_checkpoint_resumes_on_one_process_with_each_sample_once(ddp_shards: Path,
                                                                                     tmp_path: Path) -> None:
    checkpoint, first_logs, second_logs = tmp_path / "ckpt.pt", tmp_path / "first", tmp_path / "second"
    job = _torchrun(2, str(ddp_shards), *COMMON, "--steps", str(STEPS), "--checkpoint", str(checkpoint),
                    "--log-keys", str(first_logs))
    _wait_for(checkpoint, job)
    job.send_signal(signal.SIGTERM)  # torchrun ends its workers as a cancelled job's would be
    output, _ = job.communicate(timeout=HANG_S)
    assert checkpoint.exists(), output

    saved = torch.load(checkpoint, weights_only=True)
    step, epoch, position = saved["step"], saved["loader"]["epoch"], saved["loader"]["position"]
    assert saved["world_size"] == 2 and 0 < position < IMAGES // (2 * BATCH), saved["loader"]
    first = _steps_logged(first_logs)
    assert sorted(first) == [0, 1]
    for rank in (0, 1):  # whatever ran after the checkpoint is lost with the kill and trained again
        assert [r["step"] for r in first[rank]][:step] == list(range(1, step + 1)), output
    before = [key for rank in (0, 1) for r in first[rank] if r["step"] <= step and r["epoch"] == epoch
              for key in r["keys"]]
    assert len(before) == position * 2 * BATCH

    resumed = _torchrun(1, str(ddp_shards), *COMMON, "--steps", "1000", "--epochs", str(epoch + 1), "--resume",
                        "--checkpoint", str(checkpoint), "--log-keys", str(second_logs))
    output, _ = resumed.communicate(timeout=HANG_S)
    assert resumed.returncode == 0, output
    assert f"from epoch {epoch}, step {step}" in output, output
    after = _steps_logged(second_logs)
    assert sorted(after) == [0]
    assert [r["step"] for r in after[0]] == list(range(step + 1, step + 1 + len(after[0])))
    assert {r["epoch"] for r in after[0]} == {epoch}
    rest = [key for r in after[0] for key in r["keys"]]

    every_key = sorted(ShardDataset(ddp_shards, fields=("cls",))[i]["__key__"] for i in range(IMAGES))
    assert sorted(before + rest) == every_key  # nothing twice, nothing lost
    final = torch.load(checkpoint, weights_only=True)
    assert final["world_size"] == 1 and final["step"] == step + len(after[0])


def test_resume_without_a_checkpoint_is_a_usage_error(ddp_shards: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example("train_ddp")
    with pytest.raises(SystemExit) as exit_info:
        example.main([str(ddp_shards), "--resume", "--checkpoint", str(tmp_path / "missing.pt")])
    assert exit_info.value.code == 2
    assert "--resume needs an existing --checkpoint" in capsys.readouterr().err


def test_model_outputs_one_logit_per_class() -> None:
    logits = load_example("train_ddp").build_model(4)(torch.zeros(2, 3, 16, 16))
    assert logits.shape == (2, 4)
