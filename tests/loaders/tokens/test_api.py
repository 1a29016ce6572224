"""The public API of loaders.tokens is what its __init__ re-exports: pinned here, so a change is deliberate."""

from __future__ import annotations

import loaders.tokens

PUBLIC = ["Exhaustion", "GlobalGrid", "GlobalPosition", "GridSampler", "GridStart", "Mixture", "SampleIndex",
          "ScheduleSegment", "TokenDataset", "collate", "resume_grid"]


def test_all_is_pinned_sorted_and_importable() -> None:
    assert loaders.tokens.__all__ == PUBLIC == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(loaders.tokens, name) is not None
