"""Keep torch's ``get_worker_info()`` truthful inside our worker processes.

torch records a ``WorkerInfo`` (frozen; a dataclass from torch 2.13) before ``worker_init_fn`` runs. Our workers then
reseed (``loaders.loader.worker_start.seed_worker``) and read through a wrapper of the user's dataset
(``loaders.loader.process_workers``). torch promises ``info.seed == torch.initial_seed()`` and
``info.dataset`` is this process's copy of the user's dataset: code that seeds other
libraries or shards an iterable by worker relies on both, so both are re-recorded here.
``get_worker_info()`` reads a module global of torch's worker module.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from torch.utils.data._utils import worker as torch_worker

__all__ = ["WRAPPER_FLAG", "record_seed", "show_user_dataset"]

# A class attribute set to True on our wrappers of the user's dataset; the wrapped
# dataset is their ``dataset`` attribute.
WRAPPER_FLAG = "wraps_user_dataset"


def _update(**changes: Any) -> None:
    info = getattr(torch_worker, "_worker_info", None)
    if info is None:
        return
    if dataclasses.is_dataclass(info) and not isinstance(info, type):
        torch_worker._worker_info = cast(torch_worker.WorkerInfo, dataclasses.replace(info, **changes))
    else:  # torch < 2.13: a plain class that refuses assignment once built, so build another
        fields = {key: getattr(info, key) for key in ("id", "num_workers", "seed", "dataset")}
        torch_worker._worker_info = type(info)(**{**fields, **changes})


def record_seed(torch_seed: int) -> None:
    """After reseeding torch in a worker: ``get_worker_info().seed`` is ``torch_seed``."""
    _update(seed=torch_seed)


def show_user_dataset() -> None:
    """In a worker: ``get_worker_info().dataset`` is the user's dataset, not our wrapper of it."""
    info = getattr(torch_worker, "_worker_info", None)
    if info is not None and getattr(type(info.dataset), WRAPPER_FLAG, False):
        _update(dataset=info.dataset.dataset)
