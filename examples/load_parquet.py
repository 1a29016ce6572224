"""Shard a table (CSV or JSON lines) to Parquet with dataprep, then train on it through ``loaders.ParquetShardDataset``.

    python -m dataprep.synthetic raw                                  # raw/tables/: part-0.csv, part-1.jsonl
    python examples/load_parquet.py raw/tables parquet-shards         # shard, then 2 epochs over the rows
    python examples/load_parquet.py raw/tables parquet-shards --epochs 1 --batch-size 64 --columns id,score,split

Step 1 is ``dataprep shard TABLE OUT --format parquet`` (run in-process here; the same command in a
shell): rows that break the schema inferred from the files are rejects, counted by reason in the
printed summary; a second run over the same OUT finds it complete and writes nothing. Step 2 reads
the shards by row group: ``ParquetShardDataset(OUT, columns=...)`` yields one dict per row
(``{"id": int, "score": float, "split": str, "__index__": int, "__shard__": str}``) and
``loaders.DataLoader`` batches them (numbers as tensors, strings as lists), in a seeded order of
row-group blocks. The loop fits a tiny model, one learned value per ``split``, to ``score`` and
prints the loss per epoch and the rows it read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dataprep.cli import main as dataprep
from loaders import DataLoader, ParquetShardDataset


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("table", type=Path, help="a CSV / JSON-lines file, or a folder of them")
    parser.add_argument("out", type=Path, help="where dataprep writes the Parquet shards and manifest")
    parser.add_argument("--columns", default="id,score,split", help="the columns read (comma-separated)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=0, help="loader workers (0: read in this process)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order")
    return parser.parse_args(argv)


def shard_table(table: Path, out: Path) -> None:
    """``dataprep shard TABLE OUT --format parquet``; SystemExit with its status when it fails."""
    status = dataprep(["shard", str(table), str(out), "--format", "parquet", "--samples-per-shard", "100"])
    if status != 0:
        raise SystemExit(status)


class ScoreBySplit(nn.Module):
    """One learned score per split name: int64 [B] split ids -> float32 [B] predicted scores."""

    def __init__(self, splits: int) -> None:
        super().__init__()
        self.value = nn.Embedding(splits, 1)

    def forward(self, split_ids: torch.Tensor) -> torch.Tensor:
        return self.value(split_ids).squeeze(1)


def fit_scores(loader: DataLoader[Any], epochs: int) -> None:
    splits: dict[str, int] = {}  # split name -> id, in the order first met
    model = ScoreBySplit(16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(epochs):
        rows, loss_sum = 0, 0.0
        for batch in loader:
            ids = torch.tensor([splits.setdefault(name, len(splits)) for name in batch["split"]])
            loss = nn.functional.mse_loss(model(ids), batch["score"].float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rows, loss_sum = rows + len(ids), loss_sum + loss.item() * len(ids)
        print(f"epoch {epoch}: {rows} rows, loss {loss_sum / max(rows, 1):.4f}", flush=True)
    learned = {name: round(float(model.value.weight[i].detach()), 3) for name, i in sorted(splits.items())}
    print(f"score by split: {learned}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shard_table(args.table, args.out)
    columns = [c for c in args.columns.split(",") if c]
    dataset = ParquetShardDataset(args.out, columns=columns)
    print(f"{len(dataset)} rows in {args.out}, columns {columns}", flush=True)
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, seed=args.seed)
    with loader:
        fit_scores(loader, args.epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
