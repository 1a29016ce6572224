"""Compressed corpora: decompression rate per codec and library, and its share of reading rows (issue 27).

    python -m tools.bench.codec_bench [--mb 80] [--repeat 3] [--seed 0] [--keep DIR] [--json [PATH]]

Input: ``--mb`` MiB of JSON lines ``{"id": i, "text": ...}``, the text the synthetic corpus's prose
(``dataprep.synthetic.iter_documents``), written to a temporary folder (or ``--keep DIR``, reused when it holds
them), then compressed as corpora ship: gzip -6 (zlib), zstd -3 with its frame checksum, bzip2 -9, xz -6.

Rows, each on one core, best of ``--repeat``, in MiB/s of decompressed bytes per CPU second of the reading
thread (``time.thread_time``: other load on a shared machine does not lower it; every library here decodes on
the calling thread), and the compressed size:

- ``decode``: the library alone, read in 1 MiB pieces: gzip through the standard library (zlib) and through
  ISA-L (``isal.igzip``), zstd through ``compression.zstd`` (``backports.zstd`` before Python 3.14) and through
  ``zstandard``'s stream reader where installed, bzip2, xz;
- ``lines``: ``dataprep.inputs.lines.read_lines``, what the table and text readers use (the plain file too);
- ``rows``: ``dataprep.inputs.tables.iter_table_rows``, JSON parsing included: what decoding costs a writer.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import lzma
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from dataprep.inputs import compressed
from dataprep.inputs.compressed import zstd
from dataprep.inputs.lines import read_lines
from dataprep.inputs.tables import iter_table_rows
from dataprep.synthetic import iter_documents
from tools.common.report import ToolError, add_output_args, check_int, emit, format_table

TOOL = "codec_bench"
_READ_BYTES = 1 << 20
_EXTENSIONS = {"gzip": "gz", "zstd": "zst", "bzip2": "bz2", "xz": "xz"}


@dataclass(frozen=True)
class Row:
    """One way of reading the corpus: ``seconds`` (best, CPU of the reading thread), decompressed ``mib`` read,
    ``compressed_mib`` on disk."""

    kind: str
    codec: str
    library: str
    seconds: float
    mib: float
    compressed_mib: float

    @property
    def mib_s(self) -> float:
        return self.mib / self.seconds


def _compressors() -> dict[str, Callable[[bytes], bytes]]:
    zstd_options = {zstd.CompressionParameter.compression_level: 3, zstd.CompressionParameter.checksum_flag: 1}
    return {"gzip": lambda data: gzip.compress(data, compresslevel=6, mtime=0),
            "zstd": lambda data: zstd.compress(data, options=zstd_options),
            "bzip2": lambda data: bz2.compress(data, 9), "xz": lambda data: lzma.compress(data, preset=6)}


def make_corpus(folder: Path, mib: float, seed: int) -> dict[str, Path]:
    """``folder/corpus.jsonl`` of about ``mib`` MiB and its compressed copies, made unless already there."""
    folder.mkdir(parents=True, exist_ok=True)
    plain = folder / "corpus.jsonl"
    if not plain.exists() or abs(plain.stat().st_size - mib * 2**20) > 2**20:
        with open(plain, "wb") as f:
            for i, text in enumerate(iter_documents(seed, 10**9)):
                f.write((json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n").encode())
                if f.tell() >= mib * 2**20:
                    break
    files = {"plain": plain}
    for codec, compress in _compressors().items():
        path = folder / f"corpus.jsonl.{_EXTENSIONS[codec]}"
        if not path.exists() or path.stat().st_mtime < plain.stat().st_mtime:
            path.write_bytes(compress(plain.read_bytes()))
        files[codec] = path
    return files


Opener = Callable[[BinaryIO], io.BufferedIOBase]


def _decoders() -> Iterator[tuple[str, str, Opener]]:
    yield "gzip", "zlib (gzip)", lambda f: gzip.GzipFile(fileobj=f)
    if compressed.igzip is not None:
        yield "gzip", "isal.igzip", lambda f: compressed.igzip.IGzipFile(fileobj=f)
    yield "zstd", zstd.__name__, lambda f: zstd.ZstdFile(f)
    try:
        import zstandard
    except ImportError:
        pass
    else:
        yield "zstd", "zstandard", lambda f: cast(io.BufferedIOBase, zstandard.ZstdDecompressor().stream_reader(
            f, read_across_frames=True))
    yield "bzip2", "bz2", lambda f: bz2.BZ2File(f)
    yield "xz", "lzma", lambda f: lzma.LZMAFile(f)


def _best_cpu_s(repeat: int, run: Callable[[], int]) -> tuple[float, int]:
    """(best CPU seconds of this thread, bytes or items) of ``repeat`` calls of ``run``."""
    best, count = float("inf"), 0
    for _ in range(repeat):
        start = time.thread_time()
        count = run()
        best = min(best, time.thread_time() - start)
    return best, count


def _decode(path: Path, opener: Opener) -> int:
    total = 0
    with open(path, "rb") as raw, opener(raw) as f:
        while chunk := f.read(_READ_BYTES):
            total += len(chunk)
    return total


def measure_codecs(files: dict[str, Path], repeat: int) -> list[Row]:
    """The rows of the module docstring."""
    size = files["plain"].stat().st_size / 2**20
    rows = []
    for codec, library, opener in _decoders():
        seconds, nbytes = _best_cpu_s(repeat, lambda: _decode(files[codec], opener))  # noqa: B023
        if nbytes != files["plain"].stat().st_size:
            raise ToolError(f"{library} read {nbytes} bytes of {files[codec]}, not the corpus's")
        rows.append(Row(kind="decode", codec=codec, library=library, seconds=seconds, mib=size,
                        compressed_mib=files[codec].stat().st_size / 2**20))
    for codec, path in files.items():
        library = compressed.GZIP_BACKEND if codec == "gzip" else ""
        on_disk = path.stat().st_size / 2**20
        seconds, _ = _best_cpu_s(repeat, lambda: sum(1 for _ in read_lines(path, 64 * 2**20)))  # noqa: B023
        rows.append(Row(kind="lines", codec=codec, library=library, seconds=seconds, mib=size, compressed_mib=on_disk))
        seconds, _ = _best_cpu_s(repeat, lambda: sum(1 for _ in iter_table_rows(path, path.name)))  # noqa: B023
        rows.append(Row(kind="rows", codec=codec, library=library, seconds=seconds, mib=size, compressed_mib=on_disk))
    return rows


def format_report(rows: Sequence[Row]) -> str:
    plain = {r.kind: r.seconds for r in rows if r.codec == "plain"}
    table = [(r.kind, r.codec, r.library or "-", round(r.compressed_mib, 1), r.mib_s,
              (r.seconds - plain[r.kind]) / r.seconds if r.kind in plain and r.codec != "plain" else None)
             for r in rows]
    headers = ("reading", "codec", "library", "on disk MiB", "MiB/s (CPU)", "share decoding")
    size = rows[0].mib
    return "\n".join([f"corpus: {size:.1f} MiB of JSON lines (synthetic prose), one core, per CPU second", "",
                      format_table(headers, table), "",
                      "share decoding: the part of a lines/rows reading that the plain file's does not spend: "
                      "decoding's share of it"])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.codec_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=80.0, help="MiB of JSON lines (default 80)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each row, best kept (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic prose (default 0)")
    parser.add_argument("--keep", type=Path, help="folder for the corpus, kept and reused (default: a temporary one)")
    add_output_args(parser, plot=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        check_int("--repeat", args.repeat, 1)
        with tempfile.TemporaryDirectory(prefix="codec-bench-") as tmp:
            files = make_corpus(args.keep or Path(tmp), args.mb, args.seed)
            rows = measure_codecs(files, args.repeat)
    except (ToolError, OSError) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"rows": [{**asdict(r), "mib_s": r.mib_s} for r in rows]}
    emit(TOOL, format_report(rows), results, args.json, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
