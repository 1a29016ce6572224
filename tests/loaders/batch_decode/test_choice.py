"""Where a loader decodes: the rule behind ``decode="auto"`` (pure), a decoder library that cannot load breaks
nothing (nvImageCodec missing or failing to load), and the backend each device gets."""

from __future__ import annotations

import builtins
import dataclasses
import re
from typing import Any

import pytest
import torch

from loaders.batch_decode import decoders
from loaders.batch_decode.choice import DecodeInputs, DecodeMode, choose_decode
from loaders.errors import ConfigError

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")
READY = DecodeInputs(requested=DecodeMode.AUTO, device=CUDA, dataset="ShardDataset", can_defer=True,
                     own_collate=True, batched=True, iterable=False)


def _works(device: torch.device) -> None:
    return None


def _choose(problem: str | None = None, **changes: Any) -> DecodeMode:
    return choose_decode(dataclasses.replace(READY, **changes), lambda device: problem).mode


def test_auto_decodes_on_a_cuda_device_where_everything_holds() -> None:
    choice = choose_decode(READY, _works)
    assert choice.mode is DecodeMode.DEVICE and "nvImageCodec" in choice.reason


@pytest.mark.parametrize("changes", [{"device": None}, {"device": CPU}, {"can_defer": False}, {"own_collate": False},
                                     {"batched": False}, {"iterable": True}])
def test_auto_stays_on_the_cpu_path_when_anything_is_missing(changes: dict[str, Any]) -> None:
    assert _choose(**changes) is DecodeMode.CPU


def test_auto_stays_on_the_cpu_path_where_the_cuda_decoder_does_not_work() -> None:
    choice = choose_decode(READY, lambda device: "nvImageCodec does not import here")
    assert choice.mode is DecodeMode.CPU and "nvImageCodec does not import here" in choice.reason


def test_the_decoder_is_probed_only_when_everything_else_holds() -> None:
    probed: list[torch.device] = []

    def probe(device: torch.device) -> None:
        probed.append(device)

    choose_decode(dataclasses.replace(READY, can_defer=False), probe)
    choose_decode(dataclasses.replace(READY, device=CPU), probe)
    assert probed == []
    choose_decode(READY, probe)
    assert probed == [CUDA]


def test_cpu_is_always_cpu_and_device_works_on_the_cpu() -> None:
    assert _choose(requested=DecodeMode.CPU) is DecodeMode.CPU
    assert _choose(requested=DecodeMode.DEVICE, device=CPU) is DecodeMode.DEVICE


@pytest.mark.parametrize(("changes", "problem", "message"), [
    ({"device": None}, None, "needs 'device'"),
    ({"can_defer": False}, None, "does not declare can_defer_decode"),
    ({}, "no nvJPEG", "no nvJPEG"),
])
def test_device_raises_naming_what_is_missing(changes: dict[str, Any], problem: str | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _choose(problem, requested=DecodeMode.DEVICE, **changes)


@pytest.mark.parametrize("error", [ImportError("No module named 'nvidia'"),
                                   OSError("libnvimgcodec.so.0: cannot open shared object file")])
def test_an_nvimgcodec_that_does_not_load_is_a_reason_not_a_crash(error: Exception,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def failing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("nvidia"):
            raise error
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", failing)
    for problem in (decoders._cpu_problem.__wrapped__(), decoders._working_backend.__wrapped__(0)):
        assert isinstance(problem, str) and str(error) in problem and "shardfeed[gpu]" in problem
        assert choose_decode(READY, lambda device, why=problem: why).mode is DecodeMode.CPU
    with pytest.raises(ConfigError, match="decode='device' cannot be used: nvImageCodec does not import"):
        choose_decode(dataclasses.replace(READY, requested=DecodeMode.DEVICE, device=CPU),
                      lambda device: decoders._cpu_problem.__wrapped__())


def test_the_cpu_decodes_with_nvimgcodecs_cpu_backend() -> None:
    assert decoders.device_decoder_problem(CPU) is None
    decoder = decoders.make_decoder(CPU)
    assert isinstance(decoder, decoders.NvImageCodecDecoder) and decoder.backend is decoders.DecodeBackend.CPU
    assert re.fullmatch(r"nvImageCodec 0\.\d+, CPU", decoder.name)
    assert "no batch JPEG decoder" in str(decoders.device_decoder_problem(torch.device("meta")))


def test_each_cuda_backend_falls_back_to_the_ones_after_it() -> None:
    backends = {b: decoders.NvImageCodecDecoder(CUDA, b).backends for b in decoders.CUDA_BACKENDS}
    assert [b.value for b in backends[decoders.DecodeBackend.HARDWARE]] == ["hardware", "gpu", "hybrid"]
    assert [b.value for b in backends[decoders.DecodeBackend.GPU]] == ["gpu", "hybrid"]
    assert [b.value for b in backends[decoders.DecodeBackend.HYBRID]] == ["hybrid"]
    alone = decoders.NvImageCodecDecoder(CUDA, decoders.DecodeBackend.HARDWARE, fallback=False)
    assert alone.backends == (decoders.DecodeBackend.HARDWARE,) and alone.name.endswith(", hardware")
    assert not alone.is_open  # a constructor touches no device


@pytest.mark.parametrize(("device", "backend"), [(CPU, "gpu"), (CUDA, "cpu")])
def test_a_backend_on_the_wrong_device_is_a_config_error(device: torch.device, backend: str) -> None:
    with pytest.raises(ConfigError, match=f"'backend' '{backend}' does not decode on a {device.type} device"):
        decoders.NvImageCodecDecoder(device, decoders.DecodeBackend(backend))
