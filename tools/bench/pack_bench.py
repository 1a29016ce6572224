"""Packed sequences at scale: first batch, index memory, tokens/s vs nanoGPT: ``python -m tools.bench.pack_bench``.

Makes a token corpus of ``--docs`` documents and ``--tokens`` tokens in a temporary
directory (default 10^8 and 10^11, issue 21's scale): a real Megatron .idx (document
lengths log-normally spread around the mean, every one >= 1) and a sparse .bin (every
token reads as 0; no EOS inside, so each row is one segment). Then, in one run:

- first batch: ``TokenDataset(OUT, seq_len=S)`` and ``collate`` of its first B items, with
  the .idx evicted from the page cache (cold) and read in full beforehand (warm);
- index memory: bytes the dataset allocates (tracemalloc: numpy arrays included) after the
  first batch and after its plan has reached the epoch's last sequence, plus the document
  lengths it maps from the .idx (4 bytes per document), per document;
- steady state, one core (CPU time of this thread): ``TokenDataset`` items + ``collate`` over
  consecutive batches, and nanoGPT's ``get_batch`` (``np.memmap`` of the .bin per batch, B
  random windows of S+1 tokens, int64 inputs and targets), in ``--rounds`` interleaved
  rounds on the same .bin; the median round's tokens/s. nanoGPT's again over a map advised
  ``MADV_RANDOM`` (as ``TokenDataset`` maps the .bin), which separates the read-ahead a default
  map pays per page fault (the block device's ``read_ahead_kb``, reported) from the CPU work.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import mmap
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tools.common.pagecache import device_of, drop_cache
from tools.common.report import Progress, ToolError, add_output_args, check_int, emit, format_table
from tools.common.token_corpus import make_corpus

def first_batch(root: Path, seq_len: int, batch_size: int) -> dict[str, float]:
    """Seconds to open the dataset, to collate its first ``batch_size`` items, then to read the epoch's last item.

    The last item needs the plan's checkpoints over the whole epoch: what a resume near an epoch's end waits for.
    """
    from loaders.tokens import TokenDataset, collate

    t0 = time.perf_counter()
    dataset = TokenDataset(root, seq_len=seq_len)
    t1 = time.perf_counter()
    batch = collate([dataset[k] for k in range(batch_size)])
    t2 = time.perf_counter()
    dataset[len(dataset) - 1]
    t3 = time.perf_counter()
    if tuple(batch["input_ids"].shape) != (batch_size, seq_len):
        raise RuntimeError(f"first batch has shape {tuple(batch['input_ids'].shape)}")
    del dataset, batch
    gc.collect()
    return {"open_s": t1 - t0, "first_batch_s": t2 - t1, "total_s": t2 - t0, "last_sequence_s": t3 - t2}


def index_memory(root: Path, seq_len: int, batch_size: int) -> dict[str, float]:
    """Bytes per document the dataset holds: allocated (tracemalloc) + the mapped lengths, early and at epoch end."""
    from loaders.tokens import TokenDataset, collate

    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    dataset = TokenDataset(root, seq_len=seq_len)
    collate([dataset[k] for k in range(batch_size)])
    early = tracemalloc.get_traced_memory()[0] - base
    dataset[len(dataset) - 1]  # the plan's checkpoints now cover the whole epoch
    late, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    docs = dataset.corpus.num_documents
    mapped = dataset.corpus.lengths.nbytes if dataset.corpus.lengths_mapped else 0  # else a traced copy
    return {"documents": docs, "allocated_first_batch_bytes": early, "allocated_epoch_end_bytes": late - base,
            "allocated_peak_bytes": peak - base, "mapped_lengths_bytes": mapped,
            "plan_bytes": dataset.plan(0).index_bytes,
            "bytes_per_document": (late - base + mapped) / docs}


def _ours(dataset: Any, first: int, batches: int, batch_size: int) -> float:
    """CPU seconds of this thread for ``batches`` consecutive collated batches from sequence ``first``."""
    from loaders.tokens import collate

    start = time.thread_time()
    for b in range(batches):
        base = first + b * batch_size
        collate([dataset[k] for k in range(base, base + batch_size)])
    return time.thread_time() - start


def _random_map(path: Path) -> np.ndarray:
    """uint16 view of ``path`` over a map advised MADV_RANDOM (no read-ahead), as ``loaders.tokens`` maps."""
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mapped.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mapped, dtype=np.uint16)


def _nanogpt(bin_path: Path, batches: int, batch_size: int, block_size: int, generator: torch.Generator,
             *, random_map: bool = False) -> float:
    """CPU seconds of nanoGPT's ``get_batch`` (train.py, as written there) for ``batches`` batches.

    ``random_map``: the same, over a map advised MADV_RANDOM instead of ``np.memmap``'s default.
    """
    start = time.thread_time()
    for _ in range(batches):
        # nanoGPT re-maps per batch (a leak otherwise)
        data = _random_map(bin_path) if random_map else np.memmap(bin_path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
        x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64)) for i in ix])
        del x, y
    return time.thread_time() - start


def steady(root: Path, seq_len: int, batch_size: int, batches: int, rounds: int) -> dict[str, Any]:
    """Median tokens/s per core of ours and of nanoGPT's get_batch over interleaved rounds."""
    from loaders.tokens import TokenDataset

    dataset = TokenDataset(root, seq_len=seq_len)
    needed = (rounds * batches + 1) * batch_size
    if needed > len(dataset):
        raise ToolError(f"the corpus holds {len(dataset)} sequences of {seq_len}, the run needs {needed}: "
                         "raise --tokens or lower --batches/--rounds")
    _ours(dataset, 0, 1, batch_size)  # warm-up: the plan's first blocks
    generator = torch.Generator().manual_seed(0)
    bin_path = dataset.corpus.bin_paths[0]
    tokens = batches * batch_size * seq_len
    ours, theirs, advised = [], [], []
    progress = Progress("rounds", rounds)
    for r in range(rounds):
        ours.append(tokens / _ours(dataset, batch_size * (1 + r * batches), batches, batch_size))
        theirs.append(tokens / _nanogpt(bin_path, batches, batch_size, seq_len, generator))
        advised.append(tokens / _nanogpt(bin_path, batches, batch_size, seq_len, generator, random_map=True))
        progress.update(r + 1)
    progress.close()
    return {"ours_tokens_per_s": statistics.median(ours), "nanogpt_tokens_per_s": statistics.median(theirs),
            "nanogpt_random_map_tokens_per_s": statistics.median(advised),
            "ours_rounds": ours, "nanogpt_rounds": theirs, "nanogpt_random_map_rounds": advised,
            "read_ahead_kb": _read_ahead_kb(bin_path)}


def _read_ahead_kb(path: Path) -> int | None:
    """The block device's read-ahead under ``path`` (what a page fault of a default map reads), or None."""
    device = device_of(path)
    if device.block_device is None:
        return None
    for queue in (Path("/sys/class/block") / device.block_device / "queue",
                  Path("/sys/class/block") / device.block_device / ".." / "queue"):
        with contextlib.suppress(OSError, ValueError):
            return int((queue / "read_ahead_kb").read_text())
    return None


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.pack_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=10**8, help="documents in the corpus (default 10^8)")
    parser.add_argument("--tokens", type=int, default=10**11, help="tokens in the corpus (default 10^11)")
    parser.add_argument("--shards", type=int, default=1, help="shards the documents are split into")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=100, help="batches per round of the steady state")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to make the corpus (default: a temp dir)")
    add_output_args(parser, plot=None)
    args = parser.parse_args(argv)
    for name in ("docs", "tokens", "shards", "seq_len", "batch_size", "batches", "rounds"):
        check_int(f"--{name.replace('_', '-')}", getattr(args, name), 1)
    return args


def _render(args: argparse.Namespace, results: dict[str, Any]) -> str:
    cold, warm, memory, rate = results["first_batch_cold"], results["first_batch_warm"], results["memory"], \
        results["steady"]
    title = (f"{args.docs:,} documents, {args.tokens:,} tokens in {args.shards} shard(s) (sparse .bin); "
             f"S={args.seq_len}, B={args.batch_size}")
    first = format_table(["first batch", "open s", "first batch s", "total s", "target s", "then last sequence s"],
                         [["cold .idx", cold["open_s"], cold["first_batch_s"], cold["total_s"], 2.0,
                           cold["last_sequence_s"]],
                          ["warm .idx", warm["open_s"], warm["first_batch_s"], warm["total_s"], 2.0,
                           warm["last_sequence_s"]]], title=title)
    mib = 1 << 20
    index = format_table(["index memory", "MiB", "bytes/document", "target bytes/document"], [
        ["allocated after the first batch", memory["allocated_first_batch_bytes"] / mib,
         memory["allocated_first_batch_bytes"] / args.docs, None],
        ["allocated at the epoch's end", memory["allocated_epoch_end_bytes"] / mib,
         memory["allocated_epoch_end_bytes"] / args.docs, None],
        ["mapped document lengths (.idx)", memory["mapped_lengths_bytes"] / mib,
         memory["mapped_lengths_bytes"] / args.docs, None],
        ["total at the epoch's end", (memory["allocated_epoch_end_bytes"] + memory["mapped_lengths_bytes"]) / mib,
         memory["bytes_per_document"], 16]])
    nanogpt = rate["nanogpt_tokens_per_s"]
    speed = format_table(["steady state, one core", "tokens/s", "x nanoGPT", "target tokens/s"], [
        ["TokenDataset + collate", rate["ours_tokens_per_s"], rate["ours_tokens_per_s"] / nanogpt, 1e7],
        ["nanoGPT get_batch (np.memmap)", nanogpt, 1.0, None],
        ["nanoGPT get_batch, map MADV_RANDOM", rate["nanogpt_random_map_tokens_per_s"],
         rate["nanogpt_random_map_tokens_per_s"] / nanogpt, None]])
    note = (f"note: corpus made in {results['make_s']:.1f} s; CPU time of one thread; median of {args.rounds} "
            "interleaved rounds; the sparse .bin reads zeros (page cache as found); the disk's read-ahead is "
            f"{rate['read_ahead_kb']} KiB per fault of a default map (TokenDataset maps the .bin MADV_RANDOM).")
    return "\n\n".join([first, index, speed, note])


def main(argv: list[str] | None = None) -> int:
    try:
        args = _arguments(argv)
        results = run(args)
    except ToolError as err:
        print(f"pack_bench: {err}", file=sys.stderr)
        return 2
    emit("pack_bench", _render(args, results), results, args.json, argv)
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement of the module docstring, on a corpus made for it in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="pack_bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        indices = make_corpus(root, args.docs, args.tokens, args.shards)
        results: dict[str, Any] = {"docs": args.docs, "tokens": args.tokens, "shards": args.shards,
                                   "seq_len": args.seq_len, "batch_size": args.batch_size,
                                   "make_s": time.perf_counter() - t0}
        drop_cache(indices)
        results["first_batch_cold"] = first_batch(root, args.seq_len, args.batch_size)
        for path in indices:
            with open(path, "rb") as f:
                while f.read(1 << 24):
                    pass
        results["first_batch_warm"] = first_batch(root, args.seq_len, args.batch_size)
        results["memory"] = index_memory(root, args.seq_len, args.batch_size)
        results["steady"] = steady(root, args.seq_len, args.batch_size, args.batches, args.rounds)
    return results


if __name__ == "__main__":
    sys.exit(main())
