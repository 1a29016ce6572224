"""Check a shard directory (or a dataset in object storage) against its manifest: hashes, sizes, sidecars, counts.

A store URL (``s3://bucket/prefix``) is read through ``dataprep.output.out_files``: each shard
streamed through sha256 into a temporary file, checked, and removed before the next.

Token shards (``.bin`` + ``.idx``): both files re-hashed, and the ``.idx`` read
(``token_shards.read_index``) and checked against the manifest's documents, tokens and
dtype and against the size of its ``.bin``.

``verify`` collects every problem it finds as one line naming the shard (and the sample
key or byte offset where known) instead of stopping at the first; a missing or
unreadable manifest is the one thing it raises on (``FormatError``), since without it
there is nothing to check against.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dataprep.errors import FormatError
from dataprep.formats.tar.index import ShardIndex, index_tar, read_index
from dataprep.formats.manifest import FORMAT_PARQUET, FORMAT_TOKENS, FORMAT_WDS, Manifest, ShardInfo
from dataprep.output.out_files import OutFiles, open_out_files
from dataprep.formats.tokens.index import TokenIndex
from dataprep.formats.tokens.index import read_token_index

ShardCallback = Callable[[str, int], None]
_LINE_CHUNK = 1 << 20
_SHARD_SUFFIXES = (".tar", ".tar.idx", ".parquet", ".bin", ".idx")


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of ``verify``: shards found and hashed, their samples (per the manifest) and bytes."""

    shards_checked: int
    samples: int
    bytes: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(out_dir: str | os.PathLike[str], *, check_index: bool = True,
           on_shard: ShardCallback | None = None) -> VerifyReport:
    """Verify every shard listed in ``OUT/manifest.json`` (a folder or a store URL: ``output.out_files``).

    Re-hashes each shard (sha256 and size against the manifest), and with ``check_index``
    re-indexes each tar shard and compares it with its sidecar; for Parquet shards compares
    the row count in the file footer. Checks the totals invariants and the rejects file.
    ``on_shard(name, nbytes)`` is called after each shard that exists, for progress.
    """
    with open_out_files(out_dir) as files:
        manifest = files.manifest()
        problems: list[str] = []
        checked = samples = total_bytes = 0
        for info in manifest.shards:
            if not _is_plain(info.name):
                problems.append(f"{info.name}: shard name is not a plain file name in {files.where}")
                continue
            if not files.has(info.name):
                problems.append(f"{info.name}: shard missing from {files.where}")
                continue
            with files.fetch(info.name) as shard:
                size = shard.path.stat().st_size
                problems.extend(_check_bytes(shard.sha256, info, size))
                if manifest.format == FORMAT_TOKENS:
                    problems.extend(_check_tokens(files, info, size, (manifest.tokenizer or {}).get("dtype")))
                else:
                    problems.extend(_check_contents(files, shard.path, info, manifest.format, check_index))
            checked, samples, total_bytes = checked + 1, samples + info.num_samples, total_bytes + size
            if on_shard is not None:
                on_shard(info.name, size)
        problems.extend(check_totals(manifest, files))
        problems.extend(_stray_shards(files, manifest))
    return VerifyReport(checked, samples, total_bytes, tuple(problems))


def _stray_shards(files: OutFiles, manifest: Manifest) -> list[str]:
    """Shard-like files in OUT that the manifest does not name (a reader globbing the folder would take them)."""
    named = {s.name for s in manifest.shards} | {s.index for s in manifest.shards if s.index}
    pattern = manifest.options.get("pattern") if manifest.layout == "adopted" else None
    problems = []
    for name in files.names():
        if name in named:
            continue
        shard_like = name.endswith(_SHARD_SUFFIXES) or (isinstance(pattern, str) and fnmatch.fnmatch(name, pattern))
        if shard_like:
            problems.append(f"{name}: a shard file in {files.where} that the manifest does not name (a stray copy or "
                            "a leftover: readers that list the folder would take it); remove it or rerun the shard "
                            "command")
    return problems


def _is_plain(name: str | None) -> bool:
    # A manifest is data: never follow a name out of the directory.
    return bool(name) and Path(name or "").name == name and name not in (".", "..")


def _check_bytes(digest: str, info: ShardInfo, size: int) -> list[str]:
    problems = []
    if size != info.bytes:
        problems.append(f"{info.name}: {size} bytes on disk, manifest records {info.bytes} (truncated or rewritten)")
    if digest != info.sha256:
        problems.append(f"{info.name}: sha256 {digest} does not match the manifest's {info.sha256} (shard corrupted "
                        "or replaced)")
    return problems


def _check_contents(files: OutFiles, path: Path, info: ShardInfo, fmt: str, check_index: bool) -> list[str]:
    # A Parquet footer is cheap to read, so its row count is checked even without check_index.
    if fmt == FORMAT_PARQUET:
        return _check_parquet(path, info)
    if fmt != FORMAT_WDS:
        return [f"{info.name}: manifest format {fmt!r} is unknown; contents not checked"]
    if not check_index or info.index is None:
        return []
    if not _is_plain(info.index):
        return [f"{info.name}: index name {info.index!r} is not a plain file name"]
    if not files.has(info.index):
        return [f"{info.name}: index sidecar {info.index}: missing from {files.where}"]
    try:
        with files.fetch(info.index) as sidecar:
            index_sha256 = sidecar.sha256
            recorded = read_index(sidecar.path)
    except FormatError as err:
        return [f"{info.name}: index sidecar {info.index}: {err}"]
    try:
        actual = index_tar(path)
    except FormatError as err:
        return [f"{info.name}: cannot re-index the tar: {err}"]
    # The entries name the key and offset that differ; the hash catches what still parses and agrees.
    problems = compare_index(info.name, recorded, actual, manifest_samples=info.num_samples)
    if not problems and info.index_sha256 is not None and index_sha256 != info.index_sha256:
        problems.append(f"{info.index}: sha256 {index_sha256} does not match the manifest's {info.index_sha256} "
                        f"(index sidecar of {info.name} changed after the run)")
    return problems


def _check_tokens(files: OutFiles, info: ShardInfo, bin_bytes: int, dtype: object) -> list[str]:
    """A token shard's ``.idx``: its sha256, then its contents against the manifest and the ``.bin``."""
    if info.index is None or not _is_plain(info.index):
        return [f"{info.name}: token index name {info.index!r} is not a plain file name"]
    if not files.has(info.index):
        return [f"{info.index}: the token index of {info.name} is missing from {files.where}"]
    problems = []
    with files.fetch(info.index) as sidecar:
        if sidecar.sha256 != info.index_sha256:
            problems.append(f"{info.index}: sha256 {sidecar.sha256} does not match the manifest's "
                            f"{info.index_sha256} (token index corrupted or replaced)")
        try:
            index = read_token_index(sidecar.path)
        except FormatError as err:
            return [*problems, f"{info.index}: {err}"]
    return problems + token_index_problems(index, info, bin_bytes, dtype)


def token_index_problems(index: TokenIndex, info: ShardInfo, bin_bytes: int, dtype: object) -> list[str]:
    """Problems between a token shard's decoded ``.idx``, its manifest entry and its ``.bin`` of ``bin_bytes``."""
    name, problems = info.index, []
    if dtype is not None and str(index.dtype) != dtype:
        problems.append(f"{name}: dtype {index.dtype}, the manifest's tokenizer says {dtype}")
    if index.num_sequences != info.num_samples:
        problems.append(f"{name}: {index.num_sequences} documents, the manifest records {info.num_samples}")
    if info.num_tokens is not None and index.num_tokens != info.num_tokens:
        problems.append(f"{name}: {index.num_tokens} tokens, the manifest records {info.num_tokens}")
    itemsize = index.dtype.itemsize
    if index.num_tokens * itemsize != bin_bytes:
        problems.append(f"{name}: its documents hold {index.num_tokens} tokens of {itemsize} bytes, "
                        f"{info.name} has {bin_bytes} bytes")
    starts = np.concatenate([[0], np.cumsum(index.lengths[:-1], dtype=np.int64) * itemsize])
    if index.num_sequences and not np.array_equal(index.pointers, starts):
        bad = int(np.flatnonzero(index.pointers != starts)[0])
        problems.append(f"{name}: document {bad} starts at byte {int(index.pointers[bad])} of {info.name}, "
                        f"after the documents before it: byte {int(starts[bad])}")
    if not np.array_equal(index.documents, np.arange(index.num_sequences + 1)):
        problems.append(f"{name}: document indices are not 0..{index.num_sequences} (one sequence per document)")
    return problems


def _check_parquet(path: Path, info: ShardInfo) -> list[str]:
    try:
        rows = pq.read_metadata(path).num_rows
    except (pa.ArrowException, OSError) as err:
        return [f"{info.name}: unreadable Parquet footer: {err}"]
    if rows != info.num_samples:
        return [f"{info.name}: {rows} rows in the file, manifest records {info.num_samples}"]
    return []


def compare_index(shard: str, recorded: ShardIndex, actual: ShardIndex, *, manifest_samples: int) -> list[str]:
    """Problems between a sidecar (``recorded``) and a fresh scan of its tar (``actual``)."""
    problems = []
    if recorded.shard != shard:
        problems.append(f"{shard}: index sidecar names shard {recorded.shard!r}")
    if recorded.shard_bytes != actual.shard_bytes:
        problems.append(f"{shard}: index records {recorded.shard_bytes} shard bytes, the tar has {actual.shard_bytes}")
    if actual.num_samples != manifest_samples:
        problems.append(f"{shard}: tar holds {actual.num_samples} samples, manifest records {manifest_samples}")
    if recorded.num_samples != actual.num_samples:
        problems.append(f"{shard}: index lists {recorded.num_samples} samples, the tar holds {actual.num_samples}")
        return problems
    if recorded.fields != actual.fields:
        problems.append(f"{shard}: index fields {list(recorded.fields)}, the tar has {list(actual.fields)}")
        return problems
    bad = _first_mismatch(recorded, actual)
    if bad is not None:
        key = actual.key(bad)
        problems.append(
            f"{shard}: index entry {bad} (key {recorded.key(bad)!r}, offset {int(recorded.sample_offset[bad])}) "
            f"does not match the tar (key {key!r}, offset {int(actual.sample_offset[bad])})"
        )
    return problems


def _first_mismatch(recorded: ShardIndex, actual: ShardIndex) -> int | None:
    """Index of the first sample whose offsets, sizes or key differ (same sample count and fields)."""
    differs = (
        (recorded.sample_offset != actual.sample_offset)
        | (recorded.sample_size != actual.sample_size)
        | (recorded.field_offset != actual.field_offset).any(axis=1)
        | (recorded.field_size != actual.field_size).any(axis=1)
        | (recorded.key_end != actual.key_end)
    )
    hits = np.flatnonzero(differs)
    if hits.size:
        return int(hits[0])
    if not np.array_equal(recorded.key_blob, actual.key_blob):
        return next(i for i in range(actual.num_samples) if recorded.key(i) != actual.key(i))
    return None


def check_totals(manifest: Manifest, files: OutFiles) -> list[str]:
    """Problems with the manifest's accounting and, when present, the rejects file's line count."""
    t = manifest.totals
    problems = []
    if t.inputs_seen != t.samples_kept + t.rejected:
        problems.append(f"totals: inputs_seen {t.inputs_seen} != samples_kept {t.samples_kept} + rejected {t.rejected}")
    if t.samples_kept != manifest.num_samples:
        problems.append(f"totals: samples_kept {t.samples_kept} != {manifest.num_samples} samples in the shards")
    if t.rejected_by_reason and sum(t.rejected_by_reason.values()) != t.rejected:
        problems.append(f"totals: rejected_by_reason sums to {sum(t.rejected_by_reason.values())}, rejected is "
                        f"{t.rejected}")
    if manifest.rejects is not None:
        if not _is_plain(manifest.rejects):
            problems.append(f"rejects: {manifest.rejects!r} is not a plain file name")
        elif not files.has(manifest.rejects):
            problems.append(f"{manifest.rejects}: missing from {files.where} (the manifest counts {t.rejected} "
                            "rejects); it cannot be rebuilt: rerun `dataprep shard` with --overwrite to make it again")
        else:
            with files.local(manifest.rejects) as rejects:
                problems.extend(_check_rejects(rejects, manifest.rejects, t.rejected, t.rejected_by_reason))
    return problems


def _check_rejects(path: Path, name: str, rejected: int, by_reason: dict[str, int]) -> list[str]:
    """The rejects file against the totals: one JSON line per reject, counts by reason equal."""
    counts: Counter[str] = Counter()
    lines = 0
    malformed: str | None = None
    with open(path, "rb") as f:
        for lines, line in enumerate(f, 1):
            try:
                counts[str(json.loads(line)["reason"])] += 1
            except (ValueError, KeyError, TypeError):
                if malformed is None:
                    malformed = f"{name}: line {lines} is not a reject record (JSON with a 'reason'): {line[:80]!r}"
    if lines != rejected:
        return [f"{name}: {lines} lines, totals.rejected is {rejected}"]
    if malformed is not None:
        return [malformed]
    if by_reason and dict(counts) != {r: n for r, n in by_reason.items() if n}:
        differing = sorted(r for r in counts.keys() | by_reason.keys() if counts.get(r, 0) != by_reason.get(r, 0))
        shown = ", ".join(f"{r}: {counts.get(r, 0)} in the file, {by_reason.get(r, 0)} in the manifest"
                          for r in differing)
        return [f"{name}: rejects by reason differ from the manifest ({shown})"]
    return []


def count_lines(path: str | os.PathLike[str]) -> int:
    """Number of lines in a file, counting a last line without a trailing newline."""
    lines, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(_LINE_CHUNK):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")
