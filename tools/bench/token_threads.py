"""Token sequences read by threads or processes: ``python -m tools.bench.token_threads``.

Whether ``TokenDataset`` should declare ``releases_gil`` (thread workers by default under
``loaders.DataLoader``): makes a token corpus (``tools.bench.pack_bench``'s: a real .idx, a sparse
.bin read from the page cache) and measures, in ``--rounds`` interleaved rounds:

- ``T`` Python threads (1 .. ``--threads``) each reading and collating its own consecutive
  batches of S-token sequences: wall-clock tokens/s, and the ratio to one thread (what the
  GIL lets through: 2 threads at 2.0x release it fully, at 1.0x hold it throughout);
- ``loaders.DataLoader`` over the dataset (the token batch source, ``collate``): in the main
  thread (``num_workers=0``), with ``--threads`` thread workers and as many worker processes
  (batches pickled through shared memory), wall-clock tokens/s over ``--batches`` batches.

The median round of each is reported. On a machine shared with other work the ratios move
from round to round: read them as such.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tools.common.report import Progress, ToolError, add_output_args, check_int, emit, format_table
from tools.common.token_corpus import make_corpus


def _read(dataset: Any, first: int, batches: int, batch_size: int) -> None:
    from loaders.tokens import collate

    for b in range(batches):
        base = first + b * batch_size
        collate([dataset[k] for k in range(base, base + batch_size)])


def threads_rate(dataset: Any, threads: int, batches: int, batch_size: int, first: int) -> float:
    """Tokens/s (wall) of ``threads`` threads, each reading ``batches`` batches of its own from ``first`` on."""
    span = batches * batch_size
    workers = [threading.Thread(target=_read, args=(dataset, first + t * span, batches, batch_size))
               for t in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return threads * span * dataset.seq_len / (time.perf_counter() - start)


def loader_rate(dataset: Any, num_workers: int, worker_type: str, batches: int, batch_size: int) -> float:
    """Tokens/s (wall) of ``loaders.DataLoader`` for ``batches`` batches, workers already started."""
    from loaders import DataLoader

    loader: DataLoader[Any] = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                                         worker_type=worker_type, seed=0)
    with loader:
        iterator = iter(loader)
        next(iterator)  # workers started, first blocks of the plan built
        start = time.perf_counter()
        for _ in range(batches):
            next(iterator)
        return batches * batch_size * dataset.seq_len / (time.perf_counter() - start)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from loaders import TokenDataset

    with tempfile.TemporaryDirectory(prefix="token_threads-", dir=args.dir) as tmp:
        root = Path(tmp)
        make_corpus(root, args.docs, args.tokens, 1)
        dataset = TokenDataset(root, seq_len=args.seq_len)
        needed = (args.threads + 1) * args.batches * args.batch_size * args.rounds
        if needed > len(dataset):
            raise ToolError(f"the corpus holds {len(dataset)} sequences of {args.seq_len}, the run needs {needed}: "
                            "raise --tokens or lower --batches/--rounds/--threads")
        counts = list(range(1, args.threads + 1))
        setups = [(0, "thread"), (args.threads, "thread"), (args.threads, "process")]
        by_threads: dict[int, list[float]] = {t: [] for t in counts}
        by_loader: dict[str, list[float]] = {f"{n} {kind}": [] for n, kind in setups}
        progress = Progress("rounds", args.rounds)
        for r in range(args.rounds):
            first = r * (args.threads + 1) * args.batches * args.batch_size
            for t in counts:
                by_threads[t].append(threads_rate(dataset, t, args.batches, args.batch_size, first))
            for n, kind in setups:
                by_loader[f"{n} {kind}"].append(loader_rate(dataset, n, kind, args.batches, args.batch_size))
            progress.update(r + 1)
        progress.close()
    one = statistics.median(by_threads[1])
    return {"seq_len": args.seq_len, "batch_size": args.batch_size, "batches": args.batches,
            "threads": {str(t): {"tokens_per_s": statistics.median(v), "ratio": statistics.median(v) / one,
                                 "rounds": v} for t, v in by_threads.items()},
            "loader": {k: {"tokens_per_s": statistics.median(v), "rounds": v} for k, v in by_loader.items()}}


def _render(args: argparse.Namespace, results: dict[str, Any]) -> str:
    title = f"S={args.seq_len}, B={args.batch_size}, {args.batches} batches per thread per round"
    threads = format_table(["reading threads", "tokens/s", "x one thread"],
                           [[int(t), v["tokens_per_s"], v["ratio"]] for t, v in results["threads"].items()],
                           title=title)
    loader = format_table(["loaders.DataLoader workers", "tokens/s"],
                          [[k, v["tokens_per_s"]] for k, v in results["loader"].items()])
    note = f"note: wall-clock; median of {args.rounds} interleaved rounds; the page cache holds the corpus."
    return "\n\n".join([threads, loader, note])


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.token_threads", description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=200_000, help="documents in the corpus")
    parser.add_argument("--tokens", type=int, default=2 * 10**8, help="tokens in the corpus (sparse .bin)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=40, help="batches per thread (and per loader) per round")
    parser.add_argument("--threads", type=int, default=2, help="the most reading threads, and the loader's workers")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to make the corpus (default: a temp dir)")
    add_output_args(parser, plot=None)
    args = parser.parse_args(argv)
    for name in ("docs", "tokens", "seq_len", "batch_size", "batches", "threads", "rounds"):
        check_int(f"--{name.replace('_', '-')}", getattr(args, name), 1)
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = _arguments(argv)
        results = run(args)
    except ToolError as err:
        print(f"token_threads: {err}", file=sys.stderr)
        return 2
    emit("token_threads", _render(args, results), results, args.json, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
