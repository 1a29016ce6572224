"""examples/train_small.py end to end on the CPU: metrics printed, and a mid-epoch resume
that ends with the same weights and loader state as the unbroken run."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.examples.helpers import load_example, run_example
from tests.samples import image_dataset

# 24 images / batch 8 = 3 batches per epoch; 1 worker thread keeps the 2 shared cores usable.
COMMON = ["--device", "cpu", "--epochs", "1", "--batch-size", "8", "--image-size", "32", "--workers", "1"]
RUN_TIMEOUT_S = 120  # a run takes a few seconds; only a hang gets near this
EPOCH_LINE = re.compile(r"epoch 0: loss (\d+\.\d+)  acc (\d\.\d+)  (\d+\.\d) img/s  data wait (\d+\.\d)%  "
                        r"\(batches (\d+)\.\.(\d+) of 3, (\d+) samples\)")


def _train(*args: str) -> str:
    """Run the example; its stdout, after checking it exited 0."""
    return run_example("train_small", *args, timeout_s=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return image_dataset(tmp_path_factory.mktemp("train-small"), 24, classes=3, resize_short=40).shards


@pytest.fixture(scope="module")
def unbroken(shards: Path) -> tuple[str, Path]:
    """One full epoch with validation and a final checkpoint: (stdout, checkpoint)."""
    checkpoint = shards.parent / "unbroken.pt"
    return _train(str(shards), *COMMON, "--val", str(shards), "--checkpoint", str(checkpoint)), checkpoint


def test_prints_loss_accuracy_throughput_and_data_wait(unbroken: tuple[str, Path]) -> None:
    stdout, _ = unbroken
    assert "24 samples, 3 batches of 8, 1 thread workers, device cpu (torch.float32)" in stdout
    found = EPOCH_LINE.search(stdout)
    assert found is not None, stdout
    loss, acc, rate, wait = (float(found.group(i)) for i in range(1, 5))
    assert loss > 0 and 0 <= acc <= 1 and rate > 0 and 0 <= wait <= 100
    assert found.group(5, 6, 7) == ("0", "2", "24")
    assert re.search(r"val acc \d\.\d{3} \(24 samples\)", stdout), stdout


def test_resume_mid_epoch_matches_the_unbroken_run(shards: Path, unbroken: tuple[str, Path]) -> None:
    checkpoint = shards.parent / "resumed.pt"
    first = _train(str(shards), *COMMON, "--steps", "2", "--checkpoint", str(checkpoint))
    assert "stopped at step 2: epoch 0, batch 2 of 3" in first
    second = _train(str(shards), *COMMON, "--checkpoint", str(checkpoint), "--resume")
    assert "resumed from" in second and "epoch 0, batch 2, step 2" in second
    found = EPOCH_LINE.search(second)
    assert found is not None and found.group(5, 6, 7) == ("2", "2", "8"), second  # only the last batch

    expected = torch.load(unbroken[1], weights_only=True)
    resumed = torch.load(checkpoint, weights_only=True)
    assert resumed["step"] == expected["step"] == 3
    assert resumed["loader"] == expected["loader"]
    # The same batches, in the same order, with the same augmentation -> the same weights.
    torch.testing.assert_close(resumed["model"], expected["model"])
    torch.testing.assert_close(resumed["optimizer"]["state"], expected["optimizer"]["state"])


def _load_example() -> ModuleType:
    return load_example("train_small")


def test_resume_without_a_checkpoint_is_a_usage_error(shards: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = _load_example()
    missing = shards.parent / "missing.pt"
    for extra, message in ((["--resume"], "--resume needs --checkpoint"),
                           (["--resume", "--checkpoint", str(missing)], f"no checkpoint at {missing}")):
        with pytest.raises(SystemExit) as exit_info:
            example.main([str(shards), *COMMON, *extra])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_model_outputs_one_logit_per_class() -> None:
    model = _load_example().build_model(5).to(memory_format=torch.channels_last)
    logits = model(torch.zeros(2, 3, 32, 32).to(memory_format=torch.channels_last))
    assert logits.shape == (2, 5)
