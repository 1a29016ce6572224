"""The public API of each package is what its __init__ re-exports: pinned here, so a change is deliberate."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "dataprep": [
        "CleanRecord", "DataprepError", "FormatError", "Manifest", "OutputExistsError", "RawRecord", "Reject",
        "RejectBudgetError", "RejectReason", "ShardIndex", "ShardInfo", "Totals", "UsageError", "VerifyError",
        "index_path_for", "index_tar", "read_index", "read_manifest", "write_index", "write_manifest",
    ],
    "loaders": [
        "BatchShapeError", "CenterCropDecode", "Compose", "ConfigError", "DataLoader", "DecodeImage", "DecodeLabel",
        "DevicePrefetcher", "LoaderError", "LoaderStats", "Mixture", "OrderMode", "ParquetShardDataset",
        "RandomResizedCropDecode", "SampleError", "SampleIndex", "ShardDataset", "ShardError", "ShardSampler",
        "SkipBudgetError", "TokenDataset",
        "Topology", "TuningDecision",
        "UnsendableBatchError", "WorkerError", "WorkerLostError", "cpus_available", "default_num_workers",
        "sample_rng", "sample_seed", "to_device",
    ],
    "loaders.profiler": ["REPORT_VERSION", "StatsSampler", "Target", "build_report", "main", "profile"],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_all_is_pinned_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == PUBLIC[package]
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_error_trees() -> None:
    import dataprep.errors as d
    import loaders.errors as lo

    for cls in (d.UsageError, d.OutputExistsError, d.FormatError, d.VerifyError, d.RejectBudgetError,
                d.WorkerCrashError):
        assert issubclass(cls, d.DataprepError)
    for cls in (lo.ConfigError, lo.ShardError, lo.SampleError, lo.SkipBudgetError, lo.WorkerError):
        assert issubclass(cls, lo.LoaderError)
    assert issubclass(lo.ConfigError, ValueError)
