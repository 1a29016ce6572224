"""Tokenization throughput: one core against all cores, on the same text with the same tokenizer.

    python -m tools.bench.token_bench [--mb 16] [--vocab 8000] [--threads N] [--batch-docs 512]
                                [--repeat 1] [--seed 0] [--json [PATH]]

Text: ``--mb`` MB (UTF-8) of the synthetic corpus's prose documents
(``dataprep.synthetic.iter_documents``: log-normal lengths, a long tail of several thousand
tokens). Tokenizer: a byte-level BPE of ``--vocab`` ids trained on its first 2 MB with
``tokenizers`` (``dataprep.synthetic.bpe_json``; no hub), loaded with
``dataprep.tokenize.tokenizer.load_tokenizer``. Every row tokenizes all of it in batches of
``--batch-docs`` documents into arrays of the shard dtype, EOS appended:

1. single core: ``Tokenizer.encode_batch`` on this thread, timed in CPU seconds of the thread
   (other load on a shared machine does not flatter the ideal);
2. ideal: the single-core rate x N (N = ``--threads``, default the cores available);
3. threads: dataprep's ``TokenEncoder(threads=N).encode_batch``, wall seconds;
4. processes: N forked processes each calling ``Tokenizer.encode_batch`` on the pieces
   ``TokenEncoder`` would give its threads, the arrays pickled back, wall seconds (the
   tokenizer was used before the fork);
5. library threads: one ``encode_batch`` call per batch with ``TOKENIZERS_PARALLELISM=true``
   and ``RAYON_NUM_THREADS=N`` (the library's own Rayon pool), wall seconds; last, since
   the pool cannot be stopped once started.

MB/s (of UTF-8 input) and tokens/s side by side; efficiency = rate / ideal, against
``TARGET_EFFICIENCY`` for the threads row. ``CPU eff.`` = the single core's CPU seconds over
a row's (this process and its workers): the CPU a row spends beyond tokenizing, a figure
that other load on the machine barely moves, where the wall-time efficiency falls with it.
``gil share`` is the part of the single-core time spent holding the GIL (ids -> numpy
arrays): threads scale until N x share nears 1.
Rows 3-5 must give the same tokens as row 1 (checked). Best of ``--repeat`` for each row.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.errors import DataprepError
from dataprep.synthetic import bpe_json, iter_documents
from dataprep.tokenize.tokenizer import (PARALLELISM_ENV, PIECES_PER_THREAD, TokenEncoder, Tokenizer, default_threads,
                                         load_tokenizer, split_balanced)
from tools.common.report import ToolError, add_output_args, check_int, emit, format_table, machine_busy_s, process_cpu_s

TOOL = "token_bench"
TARGET_EFFICIENCY = 0.90
TRAIN_BYTES = 2_000_000
_WARMUP_DOCS = 64
SINGLE_ROW = "single core: Tokenizer.encode_batch (CPU)"
Batches = list[list[str]]


@dataclass(frozen=True)
class Row:
    """One way of tokenizing all the text: seconds (CPU for the single core, else wall), tokens made, digest,
    and cpu_s, the CPU seconds of this process and its workers meanwhile."""

    name: str
    seconds: float
    tokens: int
    digest: str
    cpu_s: float


@dataclass(frozen=True)
class TokenBenchReport:
    """The rows over ``documents`` documents, ``input_bytes`` bytes of UTF-8 text (module docstring)."""

    documents: int
    input_bytes: int
    vocab_size: int
    dtype: str
    threads: int
    cores: int
    batch_docs: int
    repeat: int
    gil_share: float
    others_cores: float | None
    rows: tuple[Row, ...]

    def rate(self, row: Row) -> tuple[float, float]:
        """(MB/s, tokens/s) of a row."""
        return self.input_bytes / 1e6 / row.seconds, row.tokens / row.seconds

    @property
    def single(self) -> Row:
        return self.rows[0]

    def efficiency(self, row: Row) -> float:
        """A row's rate over the single-core rate x threads."""
        return self.single.seconds / row.seconds / self.threads

    def cpu_efficiency(self, row: Row) -> float:
        """The single core's CPU seconds over a row's: 1 means no CPU spent beyond tokenizing (load-independent)."""
        return self.single.cpu_s / row.cpu_s if row.cpu_s > 0 else 0.0

    @property
    def threads_efficiency(self) -> float:
        return self.efficiency(self.rows[1])

    @property
    def meets_target(self) -> bool:
        return self.threads_efficiency >= TARGET_EFFICIENCY

    @property
    def same_tokens(self) -> bool:
        return all(row.digest == self.single.digest for row in self.rows)

    def to_json(self) -> dict[str, Any]:
        rows = [{**asdict(row), "mb_s": self.rate(row)[0], "tokens_s": self.rate(row)[1],
                 "efficiency": self.efficiency(row), "cpu_efficiency": self.cpu_efficiency(row)} for row in self.rows]
        return {**asdict(self), "rows": rows, "threads_efficiency": self.threads_efficiency,
                "target_efficiency": TARGET_EFFICIENCY, "meets_target": self.meets_target,
                "same_tokens": self.same_tokens}


def make_text(mb: float, seed: int, batch_docs: int) -> Batches:
    """At least ``mb`` MB of the corpus's prose documents, in batches of ``batch_docs``."""
    docs: list[str] = []
    total = 0
    for doc in iter_documents(seed, sys.maxsize):
        docs.append(doc)
        total += len(doc.encode("utf-8"))
        if total >= mb * 1e6:
            break
    return [docs[i:i + batch_docs] for i in range(0, len(docs), batch_docs)]


def train_tokenizer(batches: Batches, vocab: int, directory: Path) -> Tokenizer:
    """A BPE of ``vocab`` ids trained on the first ``TRAIN_BYTES`` of the text, loaded as dataprep loads one."""
    sample, size = [], 0
    for doc in itertools.chain.from_iterable(batches):
        sample.append(doc)
        size += len(doc)
        if size >= TRAIN_BYTES:
            break
    path = directory / "tokenizer.json"
    path.write_text(bpe_json(sample, vocab_size=vocab), encoding="utf-8")
    return load_tokenizer(path)


def _digest(arrays: Sequence[np.ndarray], into: Any) -> int:
    for array in arrays:
        into.update(array.tobytes())
        into.update(b"|")
    return sum(int(a.shape[0]) for a in arrays)


def _timed(name: str, batches: Batches, encode: Callable[[list[str]], list[np.ndarray]], *, cpu: bool) -> Row:
    clock = time.thread_time if cpu else time.perf_counter
    digest, tokens = hashlib.sha256(), 0
    start, cpu_start = clock(), process_cpu_s()
    for batch in batches:
        tokens += _digest(encode(batch), digest)
    return Row(name, max(clock() - start, 1e-9), tokens, digest.hexdigest(), process_cpu_s() - cpu_start)


_forked_tokenizer: Tokenizer | None = None


def _encode_in_child(batch: list[str]) -> list[np.ndarray]:
    if _forked_tokenizer is None:
        raise RuntimeError("the tokenizer is set before the workers fork")  # internal invariant
    return _forked_tokenizer.encode_batch(batch)


def time_processes(tokenizer: Tokenizer, batches: Batches, workers: int) -> Row:
    """Wall time of ``workers`` forked processes tokenizing each batch, cut as ``TokenEncoder`` cuts it, in order."""
    global _forked_tokenizer
    _forked_tokenizer = tokenizer
    context = multiprocessing.get_context("fork")
    cpu_start = process_cpu_s()
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        list(pool.map(_encode_in_child, [batches[0][:1]] * workers))  # start the workers, not timed
        digest, tokens, start = hashlib.sha256(), 0, time.perf_counter()
        for batch in batches:
            pieces = [batch[part] for part in split_balanced(batch, workers * PIECES_PER_THREAD)]
            for arrays in pool.map(_encode_in_child, pieces):
                tokens += _digest(arrays, digest)
        wall = time.perf_counter() - start
    # CPU of the workers counts once they are reaped, at the end of the block: their start is in it too.
    return Row(f"processes: {workers} forked, encode_batch each (wall)", max(wall, 1e-9), tokens, digest.hexdigest(),
               process_cpu_s() - cpu_start)


def time_library_threads(tokenizer: Tokenizer, batches: Batches, threads: int) -> Row:
    """Wall time of one ``encode_batch`` per batch with the library's Rayon pool on (``threads`` threads)."""
    saved = {k: os.environ.get(k) for k in (PARALLELISM_ENV, "RAYON_NUM_THREADS")}
    os.environ[PARALLELISM_ENV], os.environ["RAYON_NUM_THREADS"] = "true", str(threads)
    try:
        return _timed(f"library threads: Rayon pool of {threads} (wall)", batches, tokenizer.encode_batch, cpu=False)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def gil_share(tokenizer: Tokenizer, batches: Batches) -> float:
    """Share of the single-core CPU time spent converting ids to arrays, which holds the GIL (one thread)."""
    library = arrays = 0.0
    for batch in batches:
        start = time.thread_time()
        encodings = tokenizer.library_encode(batch)
        middle = time.thread_time()
        tokenizer.to_arrays(encodings)
        library, arrays = library + middle - start, arrays + time.thread_time() - middle
    return arrays / max(library + arrays, 1e-9)


def measure(*, mb: float = 16.0, vocab: int = 8000, threads: int | None = None, batch_docs: int = 512,
            repeat: int = 1, seed: int = 0) -> TokenBenchReport:
    """Run every row (module docstring); ``ToolError`` for bad arguments."""
    if not isinstance(mb, (int, float)) or isinstance(mb, bool) or not 0 < mb <= 4096:
        raise ToolError(f"'mb' must be a number in (0, 4096] (got {mb!r})")
    check_int("vocab", vocab, 300)
    check_int("batch_docs", batch_docs, 1)
    check_int("repeat", repeat, 1)
    check_int("seed", seed, 0)
    cores = default_threads()
    threads = cores if threads is None else check_int("threads", threads, 1)
    batches = make_text(mb, seed, batch_docs)
    with tempfile.TemporaryDirectory(prefix="token_bench-") as scratch:
        tokenizer = train_tokenizer(batches, vocab, Path(scratch))
    tokenizer.encode_batch(batches[0][:_WARMUP_DOCS])
    busy, own, start = machine_busy_s(), process_cpu_s(), time.perf_counter()
    best: dict[int, Row] = {}
    with TokenEncoder(tokenizer, threads=threads) as encoder:
        for _ in range(repeat):
            runs = (lambda: _timed(SINGLE_ROW, batches, tokenizer.encode_batch, cpu=True),
                    lambda: _timed(f"threads: TokenEncoder({threads}) (wall)", batches, encoder.encode_batch,
                                   cpu=False),
                    lambda: time_processes(tokenizer, batches, threads))
            for k, run in enumerate(runs):
                row = run()
                best[k] = row if k not in best or row.seconds < best[k].seconds else best[k]
    share = gil_share(tokenizer, batches)
    rows = (*(best[k] for k in sorted(best)), time_library_threads(tokenizer, batches, threads))
    busy_after, wall = machine_busy_s(), time.perf_counter() - start
    others = None if busy is None or busy_after is None else max(0.0, busy_after - busy - (process_cpu_s() - own))
    return TokenBenchReport(
        documents=sum(len(b) for b in batches), input_bytes=sum(len(d.encode("utf-8")) for b in batches for d in b),
        vocab_size=tokenizer.vocab_size, dtype=str(tokenizer.dtype), threads=threads, cores=cores,
        batch_docs=batch_docs, repeat=repeat, gil_share=share, others_cores=None if others is None else others / wall,
        rows=rows)


def format_report(report: TokenBenchReport) -> str:
    """The table and verdict ``python -m tools.bench.token_bench`` prints."""
    ideal_mb, ideal_tokens = (rate * report.threads for rate in report.rate(report.single))
    single = report.single
    rows: list[tuple[Any, ...]] = [(single.name, single.seconds, *report.rate(single), 1.0, single.cpu_s, 1.0)]
    rows.append((f"ideal: single core x {report.threads}", None, ideal_mb, ideal_tokens, float(report.threads),
                 None, None))
    rows += [(row.name, row.seconds, *report.rate(row), report.efficiency(row) * report.threads, row.cpu_s,
              report.cpu_efficiency(row)) for row in report.rows[1:]]
    table = format_table(("run", "seconds", "MB/s", "tokens/s", "x single", "CPU s", "CPU eff."), rows)
    efficiencies = ", ".join(f"{row.name.split(':')[0]} {report.efficiency(row):.0%}" for row in report.rows[1:])
    verdict = "meets" if report.meets_target else "BELOW"
    lines = [f"text: {report.documents:,} documents, {report.input_bytes / 1e6:.1f} MB UTF-8; BPE of "
             f"{report.vocab_size:,} ids ({report.dtype}); batches of {report.batch_docs} documents; "
             f"{report.threads} threads on {report.cores} cores available", "", table, "",
             f"efficiency = rate / (single core x {report.threads}): {efficiencies}",
             f"threads: {report.threads_efficiency:.0%} ({verdict} the {TARGET_EFFICIENCY:.0%} target)",
             "CPU eff. = single-core CPU s / the row's CPU s (this process and its workers): what a row spends "
             "beyond tokenizing, whatever else runs on the machine",
             f"gil share: {report.gil_share:.1%} of the single-core time holds the GIL (ids -> arrays); threads "
             f"scale until about {1 / max(report.gil_share, 1e-3):.0f} of them",
             "same tokens in every row: " + ("yes" if report.same_tokens else "NO")]
    if report.others_cores is not None and report.others_cores > 0.1:
        lines.append(f"note: other processes kept about {report.others_cores:.1f} of {report.cores} cores busy "
                     "meanwhile: the wall-time rows, and so the efficiencies, are lower than on a quiet machine")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.token_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=16.0, help="MB of text to tokenize (default 16)")
    parser.add_argument("--vocab", type=int, default=8000, help="ids in the BPE trained for the run (default 8000)")
    parser.add_argument("--threads", type=int, help="threads and processes (default: cores available)")
    parser.add_argument("--batch-docs", type=int, default=512, help="documents per batch (default 512)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row, best kept (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic text (default 0)")
    add_output_args(parser, plot=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        report = measure(mb=args.mb, vocab=args.vocab, threads=args.threads, batch_docs=args.batch_docs,
                         repeat=args.repeat, seed=args.seed)
    except (ToolError, DataprepError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    emit(TOOL, format_report(report), report.to_json(), args.json, argv)
    return 0 if report.same_tokens else 1


if __name__ == "__main__":
    sys.exit(main())
