"""loaders.tokens: packed token sequences and weighted mixtures over dataprep token shards (see README.md).

``TokenDataset`` (item k = packed sequence k of the epoch), ``Mixture`` (weighted sources,
closed-form schedule), ``collate`` (adds ``cu_seqlens``), ``GridSampler`` and the pure
grid helpers (``GlobalGrid``, ``GlobalPosition``, ``resume_grid``, from ``loaders.read.grid``); ``StreamIndex``
(what samplers hand a dataset: sequence, epoch, a resumed mixture's ``ScheduleSegment``).
``loaders.DataLoader`` reads both datasets by global position (``loader_source``).
"""

from __future__ import annotations

from loaders.tokens.collate import collate
from loaders.tokens.dataset import TokenDataset
from loaders.read.grid import GlobalGrid, GlobalPosition, GridStart, resume_grid
from loaders.tokens.mixture import Exhaustion, Mixture
from loaders.tokens.mixture_state import ScheduleSegment
from loaders.tokens.sampler import GridSampler
from loaders.tokens.stream import StreamIndex

__all__ = [
    "Exhaustion",
    "GlobalGrid",
    "GlobalPosition",
    "GridSampler",
    "GridStart",
    "Mixture",
    "ScheduleSegment",
    "StreamIndex",
    "TokenDataset",
    "collate",
    "resume_grid",
]
