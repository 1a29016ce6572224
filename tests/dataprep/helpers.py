"""The helpers of the dataprep tests, one of each: run the CLI, make raw inputs, read OUT as a user or peer does."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import struct
import subprocess
import sys
import tarfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from dataprep.cli import main
from tests.samples import encode, wait_until

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = ".dataprep"          # OUT's state folder, as the README names it
MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
KEYS_WITH_TIMES = ("time", "created", "elapsed", "date")


# ----------------------------------------------------------------------------- running the CLI


def shard_cli(*args: object) -> int:
    """``dataprep shard ARGS`` in this process: its exit status."""
    return main(["shard", *[os.fspath(a) if isinstance(a, Path) else str(a) for a in args]])


@dataclass(frozen=True)
class Result:
    """One CLI call: exit status and captured output."""

    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run_in(cli: Callable[..., Result], args: Sequence[object], cwd: Path) -> Result:
    """``cli(*args)`` run in process from ``cwd`` (relative RAW/OUT give identical command lines)."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return cli(*args)
    finally:
        os.chdir(old)


def start_cli(args: Sequence[object], cwd: Path, *, stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE,
              env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m dataprep.cli ARGS`` started in ``cwd`` in a session of its own, so a signal to its
    process group reaches the forked writer too; text output. SIGINT is set to its default in the child
    (``default_sigint``), as in a terminal's foreground job, whatever this suite was started with."""
    environment = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "dataprep.cli", *map(str, args)], cwd=cwd, env=environment,
                            stdout=stdout, stderr=stderr, text=True, start_new_session=True,
                            preexec_fn=default_sigint)


def default_sigint() -> None:
    """In a child before exec: SIGINT to its default action. A suite started in the background of a
    non-interactive shell (or under nohup-like launchers) inherits SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler: a Ctrl-C test would test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_when(args: Sequence[object], cwd: Path, ready: Callable[[], bool], timeout: float = 60.0,
              env: dict[str, str] | None = None) -> bool:
    """Start ``python -m dataprep.cli ARGS`` in ``cwd`` (its own session), poll ``ready()`` and SIGKILL its
    whole process group (parent and forked child: a power cut) as soon as it holds. Returns whether the
    kill came before the process ended by itself."""
    proc = start_cli(args, cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    killed = False
    try:
        if wait_until(ready, proc=proc, timeout_s=timeout):
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(0.05)  # let a forked child in the group be reaped
    return killed


def _crash_on_marked_input(ctx: object, item: object) -> object:
    """clean_item, except that the marked raw input kills its process, as a crashing decoder
    would (with a marker file set: only the first time, as the OOM killer might)."""
    from dataprep.engines import write_loop
    from dataprep.inputs.records import RawRecord

    if isinstance(item, RawRecord) and item.source == os.environ["SHARDFEED_TEST_CRASH_ON"]:
        marker = os.environ.get("SHARDFEED_TEST_CRASHED_ONCE")
        if marker is None or not Path(marker).exists():
            if marker is not None:
                Path(marker).touch()
            os._exit(int(os.environ["SHARDFEED_TEST_CRASH_STATUS"]))
    return write_loop.CLEAN_ITEM(ctx, item)


def crash_on(monkeypatch: pytest.MonkeyPatch, victim: str, status: int, once_marker: Path | None = None) -> None:
    """Make cleaning the raw input ``victim`` kill its process with exit ``status`` (``write_loop.clean_item``,
    as a crashing decoder would); with ``once_marker``, only the first time."""
    from dataprep.engines import write_loop

    monkeypatch.setenv("SHARDFEED_TEST_CRASH_ON", victim)
    monkeypatch.setenv("SHARDFEED_TEST_CRASH_STATUS", str(status))
    if once_marker is not None:
        monkeypatch.setenv("SHARDFEED_TEST_CRASHED_ONCE", os.fspath(once_marker))
    monkeypatch.setattr(write_loop, "CLEAN_ITEM", write_loop.clean_item, raising=False)
    monkeypatch.setattr(write_loop, "clean_item", _crash_on_marked_input)


# ----------------------------------------------------------------------------- raw inputs


def image_file(path: Path, size: tuple[int, int] = (48, 40), color: tuple[int, int, int] = (200, 30, 30), *,
               fmt: str = "JPEG", **params: object) -> Path:
    """Write a small solid RGB image (distinct ``color`` gives distinct bytes); JPEG at quality 90 unless
    ``params`` say otherwise (Pillow's ``save`` options)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "JPEG":
        params.setdefault("quality", 90)
    path.write_bytes(encode(Image.new("RGB", size, color), fmt, **params))
    return path


def image_tree(root: Path, classes: dict[str, int], *, broken: int = 0, size: tuple[int, int] = (48, 40),
               fmt: str = "jpg") -> list[str]:
    """``root/<class>/<i>.<fmt>``: ``classes[c]`` distinct images per class, plus ``broken`` non-images in the
    first class. Returns every file's path relative to ``root`` (POSIX), the inputs a run must account for."""
    made: list[str] = []
    kind = "JPEG" if fmt == "jpg" else "PNG"
    for ci, (name, count) in enumerate(sorted(classes.items())):
        for i in range(count):
            color = (ci * 60 % 256, i * 7 % 256, 90)
            image_file(root / name / f"{i:03d}.{fmt}", (size[0] + i, size[1]), color, fmt=kind)
            made.append(f"{name}/{i:03d}.{fmt}")
    first = sorted(classes)[0]
    for i in range(broken):
        bad = root / first / f"broken_{i}.jpg"
        bad.write_bytes(b"this is not a JPEG " + bytes([i]) * 10)
        made.append(f"{first}/broken_{i}.jpg")
    return made


def numbered_images(root: Path, n: int, classes: int = 2) -> Path:
    """``n`` distinct 40x40 JPEGs ``root/c<i % classes>/<i:03d>.jpg`` (at Pillow's default quality: -1)."""
    for i in range(n):
        color = (i * 11 % 256, i * 5 % 256, 255 - i * 3 % 256)
        image_file(root / f"c{i % classes}" / f"{i:03d}.jpg", (40, 40), color, quality=-1)
    return root


def files_at(root: Path, *rels: str, data: bytes | None = None) -> Path:
    """Create ``root/rel`` for each of ``rels``, holding ``data`` (default: the name ``rel``); returns ``root``."""
    for rel in rels:
        write_text(root / rel, rel.encode() if data is None else data)
    return root


def write_text(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path




def png_header_only(width: int, height: int, pixel_bytes: int = 0) -> bytes:
    """A PNG that declares ``width`` x ``height`` RGB pixels but holds only ``pixel_bytes`` of (zero) pixel data."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = chunk(b"IDAT", zlib.compress(b"\x00" * pixel_bytes)) if pixel_bytes else b""
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + idat + chunk(b"IEND", b"")


def decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


# ----------------------------------------------------------------------------- reading OUT


@dataclass(frozen=True)
class Output:
    """What a finished OUT says: manifest, rejects lines, and every sample's identity found in the shards."""

    manifest: dict
    rejects: list[dict]
    samples: list[tuple[str, int | None]]      # (source, row or None) of every sample in every shard
    labels: list[str | None]                   # label of every sample (image folders), parallel to samples


def read_rejects(out: Path) -> list[dict]:
    """``OUT/rejects.jsonl``: must be valid UTF-8 JSONL with no NUL byte, one object per line."""
    raw = (out / REJECTS).read_bytes()
    assert b"\x00" not in raw, f"{out / REJECTS} holds NUL bytes: {raw[:200]!r}"
    docs = []
    for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        assert line.strip(), f"{out / REJECTS} line {n} is blank"
        doc = json.loads(line)
        assert isinstance(doc, dict) and "source" in doc and "reason" in doc, f"line {n}: {line!r}"
        docs.append(doc)
    return docs


def reasons_by_source(out: Path) -> dict[str, str]:
    """source -> reason of every line of ``OUT/rejects.jsonl``."""
    return {r["source"]: r["reason"] for r in read_rejects(out)}


def _tar_samples(path: Path) -> tuple[list[tuple[str, int | None]], list[str | None], list[str], int]:
    """Sources of a tar shard read with webdataset (as a peer does); cross-checked with tarfile."""
    import webdataset as wds

    sources: list[tuple[str, int | None]] = []
    labels: list[str | None] = []
    keys = []
    for sample in wds.WebDataset(str(path), shardshuffle=False, empty_check=False):
        keys.append(sample["__key__"])
        assert "json" in sample, f"{path}: sample {sample['__key__']} has no .json (fields {sorted(sample)})"
        meta = json.loads(sample["json"])
        sources.append((meta["__source__"], meta.get("__row__")))
        labels.append(meta.get("label"))
    with tarfile.open(path) as tar:
        names = tar.getnames()
    stems = {n.split(".", 1)[0] for n in names}
    assert len(stems) == len(keys) == len(set(keys)), f"{path}: tarfile sees {len(stems)} keys, webdataset {len(keys)}"
    return sources, labels, keys, len(keys)


def _parquet_samples(path: Path) -> tuple[list[tuple[str, int | None]], list[str | None], list[str], int]:
    """Sources of a Parquet shard: ``__source__``/``__row__`` columns (tables, text) or, for media, the
    ``__source__`` inside each row's ``json`` metadata."""
    table = pq.read_table(path)
    cols = table.column_names
    keys = table.column("__key__").to_pylist()
    metas = [json.loads(j) if j else {} for j in table.column("json").to_pylist()] if "json" in cols else None
    if "__source__" in cols:
        src = table.column("__source__").to_pylist()
        rows = table.column("__row__").to_pylist() if "__row__" in cols else [None] * len(src)
    else:
        assert metas is not None, f"{path}: neither a __source__ column nor json metadata ({cols})"
        src = [m["__source__"] for m in metas]
        rows = [m.get("__row__") for m in metas]
    labels = [m.get("label") for m in metas] if metas is not None else [None] * len(src)
    return list(zip(src, rows)), labels, keys, table.num_rows


def read_output(out: Path) -> Output:
    """Read a finished OUT and check its inner consistency: manifest totals = shards + rejects, shard files
    on disk = those the manifest names, each shard's sample count and sha256 as the manifest says."""
    manifest = json.loads((out / MANIFEST).read_text())
    rejects = read_rejects(out)
    samples: list[tuple[str, int | None]] = []
    labels: list[str | None] = []
    keys: list[str] = []
    named = set()
    for shard in manifest["shards"]:
        path = out / shard["name"]
        named.add(shard["name"])
        if shard.get("index"):
            named.add(shard["index"])
        assert hashlib.sha256(path.read_bytes()).hexdigest() == shard["sha256"], f"{path}: sha256 differs"
        reader = _parquet_samples if path.suffix == ".parquet" else _tar_samples
        src, lab, shard_keys, n = reader(path)
        assert n == shard["num_samples"], f"{path}: {n} samples, manifest says {shard['num_samples']}"
        samples += src
        labels += lab
        keys += shard_keys
    on_disk = {p.name for p in out.iterdir() if p.suffix in (".tar", ".parquet", ".idx")}
    assert on_disk == named, f"not in the manifest: {sorted(on_disk - named)}; missing: {sorted(named - on_disk)}"
    dup_keys = sorted(k for k, n in Counter(keys).items() if n > 1)
    assert not dup_keys, f"sample keys used twice across shards: {dup_keys[:10]}"
    totals = manifest["totals"]
    assert totals["samples_kept"] == len(samples), (totals, len(samples))
    assert totals["rejected"] == len(rejects), (totals, len(rejects))
    assert totals["inputs_seen"] == totals["samples_kept"] + totals["rejected"], totals
    assert dict(Counter(r["reason"] for r in rejects)) == totals["rejected_by_reason"], totals
    return Output(manifest, rejects, samples, labels)


def identities(output: Output) -> Counter:
    """Every accounted input: (source, row) of each sample and each reject."""
    found: Counter = Counter(output.samples)
    found.update((r["source"], r.get("row")) for r in output.rejects)
    return found


def assert_accounted(output: Output, expected: Sequence[str | tuple[str, int | None]]) -> None:
    """Each expected input appears exactly once (in a shard or in the rejects), and nothing else does."""
    want = Counter((e, None) if isinstance(e, str) else e for e in expected)
    got = identities(output)
    twice = sorted(k for k, n in got.items() if n > 1)
    assert not twice, f"inputs accounted more than once: {twice[:10]}"
    missing = sorted(set(want) - set(got), key=repr)
    extra = sorted(set(got) - set(want), key=repr)
    assert not missing and not extra, f"inputs missing: {missing[:10]}; unexpected: {extra[:10]}"


def files_of(root: Path) -> dict[str, bytes]:
    """Relative POSIX path -> bytes of every file under ``root``."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple[int, str, int]]:
    """(mode, sha256 or link target, mtime_ns) of everything under ``root`` except ``skip``: what "untouched"
    compares. Folders' mtimes count too (a temporary file made and removed there changes it), except those of
    ``skip``'s ancestors (creating OUT changes its parent)."""
    ancestors = set(skip.parents) if skip is not None else set()
    state: dict[str, tuple[int, str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        here = Path(os.fsdecode(dirpath))
        for name in dirnames + filenames:
            p = here / os.fsdecode(name)
            if skip is not None and (p == skip or skip in p.parents):
                continue
            st = p.lstat()
            rel = str(p.relative_to(root))
            if p.is_symlink():
                state[rel] = (st.st_mode, os.readlink(p), st.st_mtime_ns)
            elif p.is_file():
                state[rel] = (st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns)
            else:
                state[rel] = (st.st_mode, "dir", 0 if p in ancestors else st.st_mtime_ns)
        if skip is not None:
            dirnames[:] = [d for d in dirnames if Path(os.fsdecode(dirpath)) / os.fsdecode(d) != skip]
    return state


def _strip_times(doc: object) -> object:
    if isinstance(doc, dict):
        return {k: _strip_times(v) for k, v in doc.items() if not any(t in k for t in KEYS_WITH_TIMES)}
    if isinstance(doc, list):
        return [_strip_times(v) for v in doc]
    return doc


def output_bytes(out: Path, *, drop_manifest_keys: Sequence[str] = ()) -> dict[str, bytes]:
    """Every file of a finished OUT except its state folder; the manifest as canonical JSON without
    timestamps (and ``drop_manifest_keys``, for runs whose command lines differ on purpose)."""
    files: dict[str, bytes] = {}
    for rel, data in files_of(out).items():
        if rel.split("/", 1)[0] == STATE_DIR:
            continue
        if rel == MANIFEST:
            doc = _strip_times(json.loads(data))
            for key in drop_manifest_keys:
                doc.pop(key, None)
            data = json.dumps(doc, sort_keys=True).encode()
        files[rel] = data
    return files


def assert_same_output(got: Path, want: Path, **kw: Sequence[str]) -> None:
    """The same files, byte for byte; the manifest as JSON but for ``drop_manifest_keys``."""
    a, b = output_bytes(got, **kw), output_bytes(want, **kw)
    assert sorted(a) == sorted(b), f"files differ: {sorted(set(a) ^ set(b))}"
    differ = [name for name in a if a[name] != b[name]]
    detail = ""
    if MANIFEST in differ:
        ma, mb = json.loads(a[MANIFEST]), json.loads(b[MANIFEST])
        detail = "; manifest keys that differ: " + ", ".join(
            f"{k}: {ma.get(k)!r} vs {mb.get(k)!r}"[:300] for k in sorted(ma.keys() | mb.keys())
            if ma.get(k) != mb.get(k))
    assert not differ, f"files whose bytes differ from the reference run: {differ}{detail}"


def verify_ok(cli: Callable[..., Result], out: Path) -> bool:
    res = cli("verify", out)
    if res.rc == 0:
        assert "OK" in res.out and "FAILED" not in res.out, res.text
    return res.rc == 0


# ----------------------------------------------------------------------------- the scenarios' trees and kill points


def shards_at_least(out: Path, n: int) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return sum(1 for p in out.iterdir() if p.suffix in (".tar", ".parquet", ".bin")) >= n
        except FileNotFoundError:
            return False
    return ready


KILL_POINTS: dict[str, Callable[[Path], Callable[[], bool]]] = {
    "state-folder": lambda out: lambda: (out / STATE_DIR).exists(),
    "first-shard": lambda out: shards_at_least(out, 1),
    "checkpoint": lambda out: lambda: (out / STATE_DIR / "checkpoint.json").exists(),
    "fourth-shard": lambda out: shards_at_least(out, 4),
    "rejects-published": lambda out: lambda: (out / REJECTS).exists(),
    "manifest-written": lambda out: lambda: (out / MANIFEST).exists(),   # before the state folder is removed
}
LATE_KILL_POINTS = ("rejects-published", "manifest-written")  # narrow windows: not always hit


def kill_tree(raw: Path) -> list[str]:
    """Enough PNGs (re-encoded to JPEG) that a run takes a few hundred ms, plus rejects."""
    return image_tree(raw, {"cat": 12, "dog": 12}, broken=3, size=(160, 120), fmt="png")


def grouped_tree(raw: Path, n: int = 24) -> list[str]:
    """``raw/<shard>/<i>.png`` with ``.txt`` / ``.json`` sidecars (some broken): one input per stem."""
    made = []
    for i in range(n):
        folder = raw / f"part{i % 3}"
        image_file(folder / f"{i:04d}.png", size=(160, 120), color=(i * 9 % 256, 40, 90), fmt="PNG")
        write_text(folder / f"{i:04d}.txt", f"caption {i}")
        write_text(folder / f"{i:04d}.json", "{broken" if i % 7 == 3 else json.dumps({"i": i}))
        made.append(f"part{i % 3}/{i:04d}.png")
    return made


def table_tree(raw: Path, rows: int = 4000) -> list[tuple[str, int]]:
    """A CSV and a JSONL with bad rows, duplicate urls and null urls: enough rows to be killed mid-run."""
    lines = ["id,url,v"]
    for i in range(1, rows + 1):
        if i % 97 == 0:
            lines.append(f"x{i},u{i},1")          # wrong type
        elif i % 13 == 0:
            lines.append(f"{i},,{i}")             # null url: never a duplicate
        else:
            lines.append(f"{i},u{(i * 7919) % (rows // 2)},{i}")   # about half are duplicates
    write_text(raw / "a.csv", "\n".join(lines) + "\n")
    jl = [json.dumps({"id": i, "url": f"u{(i * 31) % rows}", "v": 1.0}) for i in range(1, rows // 4 + 1)]
    jl[10] = "{not json"
    write_text(raw / "b.jsonl", "\n".join(jl) + "\n")
    return [("a.csv", i) for i in range(1, rows + 1)] + [("b.jsonl", i) for i in range(1, rows // 4 + 1)]


def text_tree(raw: Path, lines: int = 4000) -> list[tuple[str, int]]:
    body = "".join(f"line {(i * 7919) % (lines // 2)}\n" if i % 50 else "\n" for i in range(1, lines + 1))
    write_text(raw / "a.txt", body)
    write_text(raw / "b.txt", b"ok\n\xff bad\nline 1\n")
    return [("a.txt", i) for i in range(1, lines + 1)] + [("b.txt", i) for i in (1, 2, 3)]


def interrupted_run(tmp_path: Path, args: Sequence[str]) -> Path:
    """``tmp_path/run`` where ``dataprep ARGS`` was killed (SIGKILL) after its third shard."""
    run = tmp_path / "run"
    run.mkdir()
    assert kill_when(args, run, shards_at_least(run / "out", 3)), "the run ended before the kill"
    assert not (run / "out" / MANIFEST).exists()
    return run


def finished_out(cli: Callable[..., Result], tmp_path: Path) -> Path:
    """``tmp_path/out``: a finished, verified run over a small image tree with rejects."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 3, "dog": 3}, broken=2)
    assert cli("shard", raw, out, "--workers", "1", "--samples-per-shard", "2").rc == 0
    assert verify_ok(cli, out)
    return out
