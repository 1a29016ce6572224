"""Fixtures of the loader tests: multiprocessing's default start method set to one that pickles (spawn, forkserver)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.loaders.helpers import default_start_method


@pytest.fixture(params=["forkserver", "spawn"])
def pickling_start_method(request: pytest.FixtureRequest) -> Iterator[str]:
    """multiprocessing's default start method set as a program (or Python 3.14) sets it, then restored."""
    with default_start_method(str(request.param)) as method:
        yield method
