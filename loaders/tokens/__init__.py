"""loaders.tokens: packed token sequences and weighted mixtures over dataprep token shards (see README.md).

``TokenDataset`` (item k = packed sequence k of the epoch), ``Mixture`` (weighted sources,
closed-form schedule), ``collate`` (adds ``cu_seqlens``), ``GridSampler`` and the pure
grid helpers (``GlobalGrid``, ``GlobalPosition``, ``resume_grid``, from ``loaders.read.grid``);
``SampleIndex`` (what samplers hand every dataset: sequence, epoch, a resumed mixture's
``ScheduleSegment``; from ``loaders.read.sample_index``).
``loaders.DataLoader`` reads both datasets by global position (``loader_source``).
"""

from __future__ import annotations

from loaders.tokens.collate import collate
from loaders.tokens.dataset import TokenDataset
from loaders.read.grid import GlobalGrid, GlobalPosition, GridStart, resume_grid
from loaders.read.sample_index import SampleIndex
from loaders.tokens.mixture import Exhaustion, Mixture
from loaders.tokens.mixture_state import ScheduleSegment
from loaders.tokens.sampler import GridSampler

__all__ = [
    "Exhaustion",
    "GlobalGrid",
    "GlobalPosition",
    "GridSampler",
    "GridStart",
    "Mixture",
    "SampleIndex",
    "ScheduleSegment",
    "TokenDataset",
    "collate",
    "resume_grid",
]
