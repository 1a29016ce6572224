"""examples/train_lm.py end to end on the CPU, small: demo shards made by dataprep shard --tokenizer, loss and
tokens/s printed, and a mid-epoch resume on another number of workers that ends with the unbroken run's weights,
optimizer and loader state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.examples.helpers import load_example, run_example

# A tiny model on 16-token sequences: a few seconds a run; one model thread, so runs compare bit for bit.
SMALL = ["--seq-len", "16", "--batch-size", "4", "--dim", "16", "--layers", "1", "--heads", "2", "--log-every", "6",
         "--threads", "1", "--device", "cpu"]
RUN_TIMEOUT_S = 300  # a run takes seconds; only a hang gets near this
STEP_LINE = re.compile(r"step (\d+)/(\d+): loss (\d+\.\d+)  ([\d,]+) tokens/s  data wait (\d+\.\d)%  "
                       r"\(epoch 0, batch (\d+) of (\d+)\)")


def _train(*args: str) -> str:
    return run_example("train_lm", *args, timeout_s=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo shards, small: 120 synthetic documents through dataprep shard --tokenizer."""
    return load_example("train_lm").make_token_shards(tmp_path_factory.mktemp("train-lm") / "tokens", documents=120)


@pytest.fixture(scope="module")
def unbroken(shards: Path) -> tuple[str, Path]:
    checkpoint = shards.parent / "unbroken.pt"
    return _train(str(shards), *SMALL, "--steps", "18", "--workers", "1", "--checkpoint", str(checkpoint)), checkpoint


def test_prints_loss_and_tokens_per_second(shards: Path, unbroken: tuple[str, Path]) -> None:
    stdout, _ = unbroken
    assert re.search(r"\d+ sequences of 16 tokens \([\d,]+ tokens, 2000 ids\), \d+ batches of 4, 1 thread workers, "
                     r"device cpu \(1 threads\)", stdout), stdout
    lines = STEP_LINE.findall(stdout)
    assert [int(line[0]) for line in lines] == [6, 12, 18]
    losses = [float(line[2]) for line in lines]
    assert all(0 < loss < 10 for loss in losses) and losses[-1] < losses[0]  # log(2000) = 7.6 at the start
    assert all(int(line[3].replace(",", "")) > 0 for line in lines)
    assert "stopped at step 18: epoch 0, batch 18 of" in stdout and "global sequence 72;" in stdout


def test_resume_mid_epoch_on_other_workers_matches_the_unbroken_run(shards: Path, unbroken: tuple[str, Path]) -> None:
    checkpoint = shards.parent / "resumed.pt"
    first = _train(str(shards), *SMALL, "--steps", "7", "--workers", "1", "--checkpoint", str(checkpoint))
    assert "stopped at step 7: epoch 0, batch 7 of" in first
    second = _train(str(shards), *SMALL, "--steps", "18", "--workers", "3", "--checkpoint", str(checkpoint),
                    "--resume")
    assert "resumed from" in second and "step 7, epoch 0, batch 7" in second and "3 thread workers" in second
    assert [int(line[0]) for line in STEP_LINE.findall(second)] == [12, 18]
    digest = re.compile(r"order digest of \[0, 72\): ([0-9a-f]{16})")
    assert digest.findall(second) == digest.findall(unbroken[0]) != []

    expected = torch.load(unbroken[1], weights_only=True)
    resumed = torch.load(checkpoint, weights_only=True)
    assert resumed["step"] == expected["step"] == 18
    assert resumed["loader"] == expected["loader"]
    torch.testing.assert_close(resumed["model"], expected["model"])  # the same batches in the same order
    torch.testing.assert_close(resumed["optimizer"]["state"], expected["optimizer"]["state"])


def test_a_resume_without_a_checkpoint_is_a_usage_error(shards: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_example("train_lm").main([str(shards), *SMALL, "--resume"])
    assert exit_info.value.code == 2 and "--resume needs an existing --checkpoint" in capsys.readouterr().err


def test_the_model_attends_within_each_document_only() -> None:
    example = load_example("train_lm")
    mask = example.document_mask(torch.tensor([[0, 0, 1, 1, 1]], dtype=torch.int32))
    assert mask.shape == (1, 1, 5, 5)
    assert mask[0, 0].int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0],
                                         [0, 0, 1, 1, 1]]
    model = example.TinyLM(50, 5, 8, 1, 2)
    logits = model(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long),
                   torch.zeros(2, 5, dtype=torch.int32))
    assert logits.shape == (2, 5, 50)
