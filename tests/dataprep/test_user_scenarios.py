"""Black-box scenarios: `dataprep` driven the way a user breaks it, through the CLI only.

Every test goes through ``dataprep.cli.main([...])`` (in process) or ``python -m dataprep.cli`` in a
subprocess (to kill it with SIGKILL), and reads only what a user or a peer reads: the exit code,
stdout/stderr, ``manifest.json``, ``rejects.jsonl`` and the shards (``tarfile``, ``webdataset``,
``pyarrow.parquet``). No dataprep internals are imported.

The promises checked (dataprep/README.md, issue 12):

- every input ends in exactly one shard or in the rejects report (count and identity: each input's
  source, and row for tables and lines, appears once, and the manifest's totals agree);
- a run killed with SIGKILL at any point and started again with the same arguments ends
  byte-identical to an uninterrupted run;
- nothing outside OUT is touched, and ``--overwrite`` never removes a file dataprep did not write;
- bad input or a bad command gives a clear message naming the file or option, and a non-zero exit;
- nothing half-written looks complete: a failed or refused run leaves no manifest that
  ``dataprep verify`` calls OK over wrong output.

Sections: 1. --overwrite and where OUT is; 2. reruns with other options (and the reject budget);
3. SIGKILL / signals and resume, RAW or OUT changed in between, damaged state, concurrent runs;
4. stray files, odd names, symlinks, image modes; 5. tables and text; 6. nothing kept; 6b. verify,
index and option errors; 7. determinism (twice, --workers, ranges). Tests that start subprocesses to kill
them are marked ``slow`` (1-4 s each); the rest take well under a second.

Where a promise allows two behaviours (refuse with a message, or produce the correct output), the test
accepts either and checks the one that happened completely.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from dataprep.cli import main
from dataprep.manifest import MANIFEST_VERSION

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = ".dataprep"          # OUT's state folder, as the README names it
MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
KEYS_WITH_TIMES = ("time", "created", "elapsed", "date")


# --------------------------------------------------------------------------------------------------
# fixture helpers: tiny raw trees


def jpeg(path: Path, size: tuple[int, int] = (48, 40), color: tuple[int, int, int] = (200, 30, 30)) -> Path:
    """Write a small valid RGB JPEG (distinct ``color`` gives distinct bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path, format="JPEG", quality=90)
    return path


def png(path: Path, size: tuple[int, int] = (48, 40), color: tuple[int, int, int] = (30, 200, 30)) -> Path:
    """Write a small valid RGB PNG (re-encoded by dataprep, so it costs some cleaning time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path, format="PNG")
    return path


def image_tree(root: Path, classes: dict[str, int], *, broken: int = 0, size: tuple[int, int] = (48, 40),
               fmt: str = "jpg") -> list[str]:
    """``root/<class>/<i>.<fmt>``: ``classes[c]`` distinct images per class, plus ``broken`` non-images in the
    first class. Returns every file's path relative to ``root`` (POSIX), the inputs a run must account for."""
    made: list[str] = []
    writer = jpeg if fmt == "jpg" else png
    for ci, (name, count) in enumerate(sorted(classes.items())):
        for i in range(count):
            writer(root / name / f"{i:03d}.{fmt}", size=(size[0] + i, size[1]), color=(ci * 60 % 256, i * 7 % 256, 90))
            made.append(f"{name}/{i:03d}.{fmt}")
    first = sorted(classes)[0]
    for i in range(broken):
        bad = root / first / f"broken_{i}.jpg"
        bad.write_bytes(b"this is not a JPEG " + bytes([i]) * 10)
        made.append(f"{first}/broken_{i}.jpg")
    return made


def write_text(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# --------------------------------------------------------------------------------------------------
# running the CLI


@dataclass(frozen=True)
class Result:
    """One CLI call: exit status and captured output."""

    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """``cli("shard", raw, out, ...)`` -> Result; a traceback (uncaught exception) fails the test as is."""

    def run(*args: object) -> Result:
        capsys.readouterr()
        try:
            rc = main([str(a) for a in args])
        except SystemExit as err:  # argparse usage errors
            rc = err.code if isinstance(err.code, int) else 2
        captured = capsys.readouterr()
        return Result(int(rc), captured.out, captured.err)

    return run


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


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
    process group reaches the forked writer too; text output."""
    return subprocess.Popen([sys.executable, "-m", "dataprep.cli", *map(str, args)], cwd=cwd,
                            env={**_env(), **(env or {})}, stdout=stdout, stderr=stderr, text=True,
                            start_new_session=True)


def wait_until(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Poll ``ready()`` every 0.5 ms while ``proc`` runs, at most ``timeout`` seconds: whether it held."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.0005)
    return False


def kill_when(args: Sequence[object], cwd: Path, ready: Callable[[], bool], timeout: float = 60.0,
              env: dict[str, str] | None = None) -> bool:
    """Start ``python -m dataprep.cli ARGS`` in ``cwd`` (its own session), poll ``ready()`` and SIGKILL its
    whole process group (parent and forked child: a power cut) as soon as it holds. Returns whether the
    kill came before the process ended by itself."""
    proc = start_cli(args, cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    killed = False
    try:
        if wait_until(proc, ready, timeout):
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(0.05)  # let a forked child in the group be reaped
    return killed


# --------------------------------------------------------------------------------------------------
# reading OUT the way a user or a peer does


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
    lines = raw.decode("utf-8").splitlines()
    docs = []
    for n, line in enumerate(lines, 1):
        assert line.strip(), f"{out / REJECTS} line {n} is blank"
        doc = json.loads(line)
        assert isinstance(doc, dict) and "source" in doc and "reason" in doc, f"line {n}: {line!r}"
        docs.append(doc)
    return docs


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
        data = path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard["sha256"], f"{path}: sha256 differs from the manifest"
        reader = _parquet_samples if path.suffix == ".parquet" else _tar_samples
        src, lab, shard_keys, n = reader(path)
        assert n == shard["num_samples"], f"{path}: {n} samples, manifest says {shard['num_samples']}"
        samples += src
        labels += lab
        keys += shard_keys
    on_disk = {p.name for p in out.iterdir() if p.suffix in (".tar", ".parquet", ".idx")}
    assert on_disk == named, f"shard files not in the manifest: {sorted(on_disk - named)}; missing: {sorted(named - on_disk)}"
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
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if rel.parts[0] == STATE_DIR or not p.is_file():
            continue
        data = p.read_bytes()
        if rel.name == MANIFEST:
            doc = _strip_times(json.loads(data))
            for key in drop_manifest_keys:
                doc.pop(key, None)
            data = json.dumps(doc, sort_keys=True).encode()
        files[str(rel)] = data
    return files


def assert_same_output(got: Path, want: Path, **kw: Sequence[str]) -> None:
    a, b = output_bytes(got, **kw), output_bytes(want, **kw)
    assert sorted(a) == sorted(b), f"files differ: {sorted(set(a) ^ set(b))}"
    differ = [name for name in a if a[name] != b[name]]
    detail = ""
    if MANIFEST in differ:
        ma, mb = json.loads(a[MANIFEST]), json.loads(b[MANIFEST])
        detail = "; manifest keys that differ: " + ", ".join(
            f"{k}: {ma.get(k)!r} vs {mb.get(k)!r}"[:300] for k in sorted(ma.keys() | mb.keys()) if ma.get(k) != mb.get(k))
    assert not differ, f"files whose bytes differ from the reference run: {differ}{detail}"


def verify_ok(cli: Callable[..., Result], out: Path) -> bool:
    res = cli("verify", out)
    if res.rc == 0:
        assert "OK" in res.out and "FAILED" not in res.out, res.text
    return res.rc == 0


# ==================================================================================================
# 1. --overwrite and where OUT is


def test_raw_inside_out_is_refused_even_with_overwrite(cli, tmp_path: Path) -> None:
    data = tmp_path / "data"
    image_tree(data / "raw", {"cat": 2, "dog": 2})
    before = snapshot(tmp_path)
    for extra in ((), ("--overwrite",)):
        res = cli("shard", data / "raw", data, "--workers", "1", *extra)
        assert res.rc == 2, res.text
        assert "inside" in res.err and "raw" in res.err, res.err
        assert snapshot(tmp_path) == before, "a refused run changed files"


def test_out_inside_raw_is_refused_and_raw_untouched(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 2, "dog": 2})
    before = snapshot(tmp_path)
    for out in (raw / "shards", raw, raw / "cat" / "out"):
        res = cli("shard", raw, out, "--workers", "1", "--overwrite")
        assert res.rc == 2, res.text
        assert "RAW" in res.err, res.err
        assert snapshot(tmp_path) == before, f"refused run with OUT={out} changed RAW"


def test_raw_and_out_nested_through_symlinks_are_refused(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 2, "dog": 2})
    os.symlink(raw, tmp_path / "raw_link")
    os.symlink(raw / "cat", tmp_path / "out_link")          # OUT that is, in fact, a class folder of RAW
    (tmp_path / "data").mkdir()
    os.symlink(tmp_path / "data", tmp_path / "data_link")
    os.symlink(raw, tmp_path / "data" / "raw")               # RAW reached through OUT
    before = snapshot(tmp_path)
    for args in ((tmp_path / "raw_link", raw / "shards"), (raw, tmp_path / "out_link"),
                 (tmp_path / "data_link" / "raw", tmp_path / "data"), (tmp_path / "raw_link", raw)):
        for extra in ((), ("--overwrite",)):
            res = cli("shard", *args, "--workers", "1", *extra)
            assert res.rc == 2, (args, extra, res.text)
            assert snapshot(tmp_path) == before, (args, extra)


def test_out_is_the_current_folder_of_user_files(cli, tmp_path: Path, monkeypatch) -> None:
    raw, home = tmp_path / "raw", tmp_path / "home"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    write_text(home / "thesis.tex", "years of work")
    write_text(home / "data" / "results.csv", "a,b\n")
    monkeypatch.chdir(home)
    before = snapshot(home)
    for extra in ((), ("--overwrite",)):
        res = cli("shard", raw, ".", "--workers", "1", *extra)
        after = snapshot(home)
        assert all(after.get(k) == v for k, v in before.items() if "/" in k or k == "thesis.tex"), res.text
        if res.rc == 0:
            assert_accounted(read_output(home), inputs)
        else:
            assert res.rc == 2 and "thesis.tex" in res.err, res.text


def test_overwrite_on_a_folder_of_user_files_leaves_them(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    write_text(out / "notes.txt", "my notes")
    write_text(out / "models" / "best.pt", b"\x00weights")
    write_text(out / "shard-000000.tar", b"a tar the user made by hand")
    before = snapshot(out)
    res = cli("shard", raw, out, "--workers", "1", "--overwrite")
    after = snapshot(out)
    assert all(after.get(k) == v for k, v in before.items()), \
        f"--overwrite removed or changed user files: {sorted(k for k, v in before.items() if after.get(k) != v)}"
    if res.rc == 0:
        assert_accounted(read_output(out), inputs)
    else:
        assert res.rc == 2, res.text
        assert any(n in res.err for n in ("notes.txt", "best.pt", "models", "shard-000000.tar")), res.err


def test_overwrite_after_finished_run_with_user_files_added(cli, tmp_path: Path) -> None:
    """The user documents a finished OUT, then reruns with --overwrite: their files survive (refused or kept)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=1)
    assert cli("shard", raw, out, "--workers", "1", "--samples-per-shard", "1").rc == 0
    first = output_bytes(out)
    write_text(out / "README.md", "what these shards are")
    write_text(out / "extra" / "split.txt", "train")
    res = cli("shard", raw, out, "--workers", "1", "--overwrite", "--samples-per-shard", "4")
    assert (out / "README.md").read_text() == "what these shards are"
    assert (out / "extra" / "split.txt").read_text() == "train"
    if res.rc == 0:
        output = read_output(out)
        assert len(output.manifest["shards"]) == 2
        assert_accounted(output, inputs)
    else:
        assert res.rc == 2 and "README.md" in res.err, res.text
        assert output_bytes(out) == {**first, "README.md": b"what these shards are", "extra/split.txt": b"train"}
        assert verify_ok(cli, out)


def test_overwrite_leaves_no_stale_shard_of_the_previous_run(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=1)
    assert cli("shard", raw, out, "--workers", "1", "--samples-per-shard", "1").rc == 0
    res = cli("shard", raw, out, "--workers", "1", "--overwrite", "--samples-per-shard", "4")
    assert res.rc == 0, res.text
    output = read_output(out)  # also checks that every shard file in OUT is one the manifest names
    assert len(output.manifest["shards"]) == 2
    assert_accounted(output, inputs)
    assert verify_ok(cli, out)


@pytest.mark.slow
def test_overwrite_after_interrupted_run_with_other_options(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = _interrupt(tmp_path, args)
    new = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "5", "--no-progress", "--overwrite")
    assert run_in(cli, new, run).rc == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert run_in(cli, new, fresh).rc == 0
    assert_same_output(run / "out", fresh / "out")
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
def test_overwrite_of_interrupted_run_with_another_prefix_leaves_no_old_shard(cli, tmp_path: Path) -> None:
    """Killed mid-run (a shard renamed but not yet checkpointed), then --overwrite with another --prefix:
    OUT holds only the new run's shards, none of the killed run's (they would look like part of the data)."""
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = _interrupt(tmp_path, args)
    res = run_in(cli, (*args, "--overwrite", "--prefix", "train"), run)
    assert res.rc == 0, res.text
    output = read_output(run / "out")
    assert all(s["name"].startswith("train") for s in output.manifest["shards"])
    leftovers = sorted(p.name for p in (run / "out").iterdir() if p.name.startswith(("shard", ".shard")))
    assert not leftovers, f"files of the killed run left in OUT: {leftovers}"
    assert_accounted(output, inputs)


def test_out_is_a_file_is_refused(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 2, "dog": 2})
    write_text(tmp_path / "out", "a file")
    for extra in ((), ("--overwrite",)):
        res = cli("shard", raw, tmp_path / "out", "--workers", "1", *extra)
        assert res.rc == 2 and "out" in res.err, res.text
        assert (tmp_path / "out").read_text() == "a file"


@pytest.mark.parametrize("kind", ["images", "table-dedup", "text-lines"])
def test_nothing_outside_out_is_touched(cli, tmp_path: Path, kind: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "work" / "out"
    extra: tuple[str, ...] = ()
    if kind == "images":
        image_tree(raw, {"cat": 3, "dog": 3}, broken=1)
    elif kind == "table-dedup":
        _table_tree(raw, rows=300)
        extra = ("--dedup-on", "url", "--required", "id")
    else:
        _text_tree(raw, lines=300)
        extra = ("--text-unit", "line")
    write_text(tmp_path / "work" / "sibling.txt", "keep")
    before = snapshot(tmp_path, skip=out)
    assert cli("shard", raw, out, "--workers", "2", *extra).rc == 0
    assert cli("shard", raw, out, "--workers", "2", "--overwrite", "--seed", "3", *extra).rc == 0
    after = snapshot(tmp_path, skip=out)
    assert after == before, sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


# ==================================================================================================
# 2. rerun with another option


OPTION_CHANGES = [
    pytest.param(("--samples-per-shard", "1"), "samples-per-shard", id="samples-per-shard"),
    pytest.param(("--shard-size", "3KiB"), "shard-size", id="shard-size"),
    pytest.param(("--resize-short", "32"), "resize-short", id="resize-short"),
    pytest.param(("--format", "parquet"), "format", id="format"),
    pytest.param(("--seed", "7"), "seed", id="seed"),
    pytest.param(("--no-shuffle",), "no-shuffle", id="no-shuffle"),
]


@pytest.mark.parametrize(("change", "flag"), OPTION_CHANGES)
def test_rerun_finished_out_with_another_option(cli, tmp_path: Path, change: tuple[str, ...], flag: str) -> None:
    raw = tmp_path / "raw"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=1, size=(64, 48))
    base = ("--workers", "1", "--samples-per-shard", "2")
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert cli("shard", raw, out, *base).rc == 0
    first = output_bytes(out)
    res = cli("shard", raw, out, *base, *change)
    if res.rc == 0:  # accepted: must be the output of the new options, not a mix
        assert cli("shard", raw, fresh, *base, *change).rc == 0
        assert_same_output(out, fresh, drop_manifest_keys=("command",))
        assert_accounted(read_output(out), inputs)
    else:
        assert res.rc == 2, res.text
        assert "--overwrite" in res.err, res.err
        assert output_bytes(out) == first, "a refused rerun changed the finished output"
        assert verify_ok(cli, out)
    res = cli("shard", raw, out, *base, *change, "--overwrite")
    assert res.rc == 0, res.text
    assert cli("shard", raw, fresh, *base, *change, "--overwrite").rc == 0
    assert_same_output(out, fresh, drop_manifest_keys=("command",))


@pytest.mark.parametrize(("change", "flag"), OPTION_CHANGES)
def test_refusal_names_the_option_as_the_user_typed_it(cli, tmp_path: Path, change: tuple[str, ...], flag: str) -> None:
    """The message names the CLI flag that differs (not an internal field name) and the way out."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2})
    base = ("--workers", "1", "--samples-per-shard", "2")
    assert cli("shard", raw, out, *base).rc == 0
    res = cli("shard", raw, out, *base, *change)
    if res.rc == 0:
        pytest.skip("rerun accepted (checked for correctness elsewhere)")
    assert f"--{flag}" in res.err and "--overwrite" in res.err, res.err


@pytest.mark.slow
@pytest.mark.parametrize(("change", "flag"), OPTION_CHANGES[:4])
def test_rerun_interrupted_out_with_another_option(cli, tmp_path: Path, change: tuple[str, ...], flag: str) -> None:
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = _interrupt(tmp_path, args)
    before = output_bytes(run / "out")
    res = run_in(cli, (*args, *change), run)
    if res.rc == 0:  # accepted: exactly the output of the new options
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        assert run_in(cli, (*args, *change), fresh).rc == 0
        assert_same_output(run / "out", fresh / "out")
        return
    assert res.rc == 2 and "--overwrite" in res.err, res.text
    assert output_bytes(run / "out") == before, "a refused rerun changed the interrupted output"
    # the original command still resumes to the uninterrupted result
    assert run_in(cli, args, run).rc == 0
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, args, ref).rc == 0
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


def test_rerun_same_command_is_a_noop(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2}, broken=1)
    args = ("shard", raw, out, "--workers", "1")
    assert cli(*args).rc == 0
    first = output_bytes(out)
    assert cli(*args).rc == 0
    assert output_bytes(out) == first


def test_rerun_with_other_spellings_of_the_same_paths_is_a_noop(cli, tmp_path: Path) -> None:
    """Tab completion adds a slash, a script uses ./ or an absolute path or a link: the same RAW and OUT."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2})
    os.symlink(raw, tmp_path / "raw_link")
    (tmp_path / "sub").mkdir()
    assert run_in(cli, ("shard", "raw", "out", "--workers", "1"), tmp_path).rc == 0
    first = output_bytes(out, drop_manifest_keys=("command",))
    for cwd, raw_arg, out_arg in ((tmp_path, "raw/", "out/"), (tmp_path, "./raw", "./out"), (tmp_path, str(raw), "out"),
                                  (tmp_path, "raw_link", "out"), (tmp_path / "sub", "../raw", "../out")):
        res = run_in(cli, ("shard", raw_arg, out_arg, "--workers", "1"), cwd)
        assert res.rc == 0 and "already complete" in res.out, (raw_arg, out_arg, res.text)
        assert output_bytes(out, drop_manifest_keys=("command",)) == first


def test_rerun_with_options_that_do_not_shape_output_is_a_noop(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2}, broken=1)
    args = ("shard", raw, out, "--workers", "1", "--samples-per-shard", "2")
    assert cli(*args).rc == 0
    first = output_bytes(out, drop_manifest_keys=("command",))
    for extra in (("--json",), ("--no-progress",), ("--workers", "2"), ("--max-reject-fraction", "0.9"),
                  ("--allow-empty",)):
        res = cli(*args, *extra)
        assert res.rc == 0, (extra, res.text)
        assert output_bytes(out, drop_manifest_keys=("command",)) == first, extra
    res = cli(*args, "--json")
    assert json.loads(res.out)["totals"]["samples_kept"] == 4


def test_reject_budget_then_rerun_with_higher_fraction(cli, tmp_path: Path) -> None:
    """Stopped by --max-reject-fraction, rerun with a larger one: valid JSONL, each reject once."""
    raw = tmp_path / "raw"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=3)
    base = ("--workers", "1", "--samples-per-shard", "2")
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.1")
    assert res.rc == 1, res.text
    assert "reject" in res.err and "0.1" in res.err, res.err
    assert not (out / MANIFEST).exists(), "a run over its reject budget left a manifest"
    assert not verify_ok(cli, out)
    assert len(read_rejects(out)) == 3, "the failed run's rejects report is there to read"
    # the same command again still fails: it is not 'finished'
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.1")
    assert res.rc == 1, res.text
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.5")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, inputs)
    assert cli("shard", raw, fresh, *base, "--max-reject-fraction", "0.5").rc == 0
    assert_same_output(out, fresh, drop_manifest_keys=("command",))


@pytest.mark.slow
def test_reject_budget_run_killed_then_rerun_with_higher_fraction(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "3", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, (*args, "--max-reject-fraction", "0.5"), ref).rc == 0
    assert kill_when((*args, "--max-reject-fraction", "0.01"), run, _shards_at_least(run / "out", 4))
    res = run_in(cli, (*args, "--max-reject-fraction", "0.01"), run)
    assert res.rc == 1 and "0.01" in res.err, res.text
    assert len(read_rejects(run / "out")) == 3
    res = run_in(cli, (*args, "--max-reject-fraction", "0.5"), run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.parametrize(("fraction", "rc"), [("0.25", 0), ("0.249", 1), ("0", 1), ("1", 0)])
def test_reject_budget_boundary(cli, tmp_path: Path, fraction: str, rc: int) -> None:
    """1 reject in 4 inputs: "more than F" fails; exactly F does not."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 1}, broken=1)
    res = cli("shard", raw, out, "--workers", "1", "--max-reject-fraction", fraction)
    assert res.rc == rc, res.text
    assert (out / MANIFEST).exists() == (rc == 0)
    assert len(read_rejects(out)) == 1


def test_stricter_reject_budget_on_a_finished_out_fails_like_a_fresh_run(cli, tmp_path: Path) -> None:
    """`dataprep shard raw out --max-reject-fraction 0.01 && train`: the exit status must not depend on whether
    OUT was already finished (a fresh run exits 1 here; "already complete" with exit 0 lets the script train)."""
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 2, "dog": 2}, broken=1)
    base = ("--workers", "1")
    assert cli("shard", raw, tmp_path / "fresh", *base, "--max-reject-fraction", "0.01").rc == 1
    out = tmp_path / "out"
    assert cli("shard", raw, out, *base).rc == 0
    first = output_bytes(out)
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.01")
    assert res.rc == 1, f"exit {res.rc} over a budget a fresh run fails: {res.text}"
    assert "0.01" in res.err, res.err
    assert output_bytes(out) == first


def test_empty_output_rerun_without_allow_empty_fails_like_a_fresh_run(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    for i in range(3):
        write_text(raw / "cat" / f"{i}.jpg", b"garbage" * (i + 1))
    assert cli("shard", raw, out, "--workers", "1", "--allow-empty").rc == 0
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 1 and "--allow-empty" in res.err, f"exit {res.rc} with no sample kept: {res.text}"


def test_reject_budget_tables_then_rerun(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    rows = ["id,name"] + [f"{i},n{i}" if i % 2 else f"x{i},n{i}" for i in range(1, 11)]
    write_text(raw / "t.csv", "\n".join(rows) + "\n")
    base = ("--workers", "1", "--samples-per-shard", "2", "--schema", '{"id": "int64", "name": "string"}')
    out = tmp_path / "out"
    assert cli("shard", raw, out, *base, "--max-reject-fraction", "0.2").rc == 1
    res = cli("shard", raw, out, *base, "--max-reject-fraction", "0.6")
    assert res.rc == 0, res.text
    assert_accounted(read_output(out), [("t.csv", i) for i in range(1, 11)])


# ==================================================================================================
# 3. kill -9 and resume; RAW changed in between


def _state_file(out: Path, name: str) -> Callable[[], bool]:
    return lambda: (out / STATE_DIR / name).exists()


def _shards_at_least(out: Path, n: int) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return sum(1 for p in out.iterdir() if p.suffix in (".tar", ".parquet")) >= n
        except FileNotFoundError:
            return False
    return ready


def _rejects_published(out: Path) -> Callable[[], bool]:
    return lambda: (out / REJECTS).exists()


KILL_POINTS = {
    "state-folder": lambda out: lambda: (out / STATE_DIR).exists(),
    "first-shard": lambda out: _shards_at_least(out, 1),
    "checkpoint": lambda out: _state_file(out, "checkpoint.json"),
    "fourth-shard": lambda out: _shards_at_least(out, 4),
    "rejects-published": _rejects_published,
    "manifest-written": lambda out: lambda: (out / MANIFEST).exists(),   # before the state folder is removed
}
LATE_KILL_POINTS = ("rejects-published", "manifest-written")  # narrow windows: not always hit


def _kill_tree(raw: Path) -> list[str]:
    """Enough PNGs (re-encoded to JPEG) that a run takes a few hundred ms, plus rejects."""
    return image_tree(raw, {"cat": 12, "dog": 12}, broken=3, size=(160, 120), fmt="png")


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_kill9_then_resume_is_byte_identical(cli, tmp_path: Path, point: str, workers: str) -> None:
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", workers, "--samples-per-shard", "3", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    killed = kill_when(args, run, KILL_POINTS[point](run / "out"))
    out = run / "out"
    interrupted = killed and not (out / MANIFEST).exists()
    if point not in LATE_KILL_POINTS:
        assert interrupted, f"the run ended before the kill at {point}"
    if interrupted:
        assert not verify_ok(cli, out), "verify says OK on an interrupted run"
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)
    assert verify_ok(cli, run / "out")


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("point", ["checkpoint", "fourth-shard"])
def test_kill9_with_many_ranges_resumes_byte_identical(cli, tmp_path: Path, point: str, workers: str) -> None:
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", workers, "--samples-per-shard", "2", "--range-size", "3KiB",
            "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    ranges = {s["name"].split("-")[1] for s in json.loads((ref / "out" / MANIFEST).read_text())["shards"]}
    assert len(ranges) > 2, ranges
    assert kill_when(args, run, KILL_POINTS[point](run / "out"))
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


def _grouped_tree(raw: Path, n: int = 24) -> list[str]:
    """``raw/<shard>/<i>.png`` with ``.txt`` / ``.json`` sidecars (some broken): one input per stem."""
    made = []
    for i in range(n):
        folder = raw / f"part{i % 3}"
        png(folder / f"{i:04d}.png", size=(160, 120), color=(i * 9 % 256, 40, 90))
        write_text(folder / f"{i:04d}.txt", f"caption {i}")
        write_text(folder / f"{i:04d}.json", "{broken" if i % 7 == 3 else json.dumps({"i": i}))
        made.append(f"part{i % 3}/{i:04d}.png")
    return made


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["images-parquet", "grouped-wds", "grouped-parquet"])
@pytest.mark.parametrize("point", ["first-shard", "fourth-shard", "rejects-published"])
def test_kill9_other_layouts_and_formats_resume_byte_identical(cli, tmp_path: Path, kind: str, point: str) -> None:
    raw = tmp_path / "raw"
    if kind.startswith("images"):
        inputs = _kill_tree(raw)
        extra: tuple[str, ...] = ()
    else:
        inputs = _grouped_tree(raw)
        extra = ("--layout", "grouped")
    extra += ("--format", kind.split("-")[1])
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "3", "--no-progress", *extra)
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    killed = kill_when(args, run, KILL_POINTS[point](run / "out"))
    if point != "rejects-published":
        assert killed and not (run / "out" / MANIFEST).exists(), f"the run ended before the kill at {point}"
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


STATE_DAMAGE = {
    "checkpoint-truncated": (lambda out: os.truncate(out / STATE_DIR / "checkpoint.json", 10), "checkpoint.json"),
    "checkpoint-deleted": (lambda out: (out / STATE_DIR / "checkpoint.json").unlink(), "checkpoint.json"),
    "plan-garbage": (lambda out: (out / STATE_DIR / "plan.json").write_text("{not json"), "plan.json"),
    "state-folder-deleted": (lambda out: __import__("shutil").rmtree(out / STATE_DIR), "shard-"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(STATE_DAMAGE))
def test_damaged_state_of_a_killed_run(cli, tmp_path: Path, damage: str) -> None:
    """The state folder of a killed run is damaged (a disk, a user): the rerun names the file and the way
    out, or recovers to the right bytes; --overwrite always recovers. Never a traceback."""
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = _interrupt(tmp_path, args)
    breaker, named = STATE_DAMAGE[damage]
    breaker(run / "out")
    res = run_in(cli, args, run)
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, args, ref).rc == 0
    if res.rc == 0:
        assert_same_output(run / "out", ref / "out")
    else:
        assert res.rc in (1, 2) and named in res.err, res.text
        assert not verify_ok(cli, run / "out")
        if damage != "state-folder-deleted":  # without any state, dataprep cannot know the shards are its own
            assert "--overwrite" in res.err, res.err
            res = run_in(cli, (*args, "--overwrite"), run)
            assert res.rc == 0, res.text
            assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    if res.rc == 0:
        assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong-version"])
def test_damaged_manifest_of_a_finished_out(cli, tmp_path: Path, damage: str) -> None:
    out = _finished(cli, tmp_path)
    text = (out / MANIFEST).read_text()
    if damage == "truncated":
        (out / MANIFEST).write_text(text[: len(text) // 2])
    elif damage == "garbage":
        (out / MANIFEST).write_bytes(b"\x00" * 100)
    else:
        assert f'"version": {MANIFEST_VERSION}' in text
        (out / MANIFEST).write_text(text.replace(f'"version": {MANIFEST_VERSION}', '"version": 99', 1))
    for args in (("verify", out), ("info", out), ("shard", tmp_path / "raw", out, "--workers", "1",
                                                    "--samples-per-shard", "2")):
        res = cli(*args)
        assert res.rc != 0, (args[0], res.text)
        assert MANIFEST in res.err, (args[0], res.err)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm-parent", "sigkill-parent-rerun-at-once"])
def test_interrupted_by_a_signal_then_rerun(cli, tmp_path: Path, how: str) -> None:
    """Ctrl-C (SIGINT to the foreground group) ends with the resume hint and exit 130; SIGTERM or SIGKILL to the
    parent alone (a scheduler) also stops the writing child; a rerun at once ends byte-identical."""
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "2", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    proc = start_cli(args, run)
    try:
        wait_until(proc, _shards_at_least(run / "out", 3))
        assert proc.poll() is None, "the run ended before the signal"
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM if how == "sigterm-parent" else signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        if how == "ctrl-c":
            assert proc.returncode == 130 and "rerun" in err, (proc.returncode, err)
            assert "Traceback" not in err, err
        res = run_in(cli, args, run)  # at once: a child still alive would race with this run
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
def test_kill9_twice_then_resume_is_byte_identical(tmp_path: Path, cli) -> None:
    raw = tmp_path / "raw"
    _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "2", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    assert kill_when(args, run, _shards_at_least(run / "out", 2))
    kill_when(args, run, _shards_at_least(run / "out", 6))
    assert run_in(cli, args, run).rc == 0
    assert_same_output(run / "out", ref / "out")


def _interrupt(tmp_path: Path, args: Sequence[str]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    assert kill_when(args, run, _shards_at_least(run / "out", 3)), "the run ended before the kill"
    assert not (run / "out" / MANIFEST).exists()
    return run


def _sources_in_first_shard(out: Path) -> list[str]:
    """Sources of the samples in the first completed tar shard (what a resume would keep)."""
    first = sorted(p for p in out.iterdir() if p.suffix == ".tar")[0]
    with tarfile.open(first) as tar:
        return sorted(json.loads(tar.extractfile(m).read())["__source__"] for m in tar.getmembers()
                      if m.name.endswith(".json"))


def _change_raw(raw: Path, change: str, done: str) -> str:
    """Change RAW; ``done`` is an input already written to a completed shard. Returns the path changed."""
    if change == "added":
        png(raw / "dog" / "new_one.png", size=(150, 100), color=(1, 2, 3))
        return "dog/new_one.png"
    if change == "new-class":
        png(raw / "zebra" / "z.png", size=(100, 100), color=(9, 9, 9))
        return "zebra/z.png"
    if change == "removed":
        (raw / done).unlink()
    elif change == "modified-same-size":  # rewritten in place, same size (now a corrupt PNG)
        data = bytearray((raw / done).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (raw / done).write_bytes(bytes(data))
    elif change == "modified-bigger":
        png(raw / done, size=(300, 200), color=(0, 0, 250))
    return done


RAW_CHANGE_KINDS = ["added", "removed", "modified-same-size", "modified-bigger", "new-class"]


@pytest.mark.slow
@pytest.mark.parametrize("change", RAW_CHANGE_KINDS)
def test_raw_changed_between_kill_and_resume(cli, tmp_path: Path, change: str) -> None:
    raw = tmp_path / "raw"
    _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = _interrupt(tmp_path, args)
    out = run / "out"
    time.sleep(0.01)  # a later mtime
    changed = _change_raw(raw, change, _sources_in_first_shard(out)[0])
    res = run_in(cli, args, run)
    if res.rc == 0:  # replanned: must equal a fresh run over the new RAW
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        assert run_in(cli, args, fresh).rc == 0
        assert_same_output(out, fresh / "out")
    else:
        assert res.rc in (1, 2), res.text
        assert "Traceback" not in res.err, res.err
        assert "--overwrite" in res.err, res.err
        assert changed in res.err, f"the refusal does not name the changed file {changed}: {res.err}"
        assert not verify_ok(cli, out), "verify says OK on an OUT whose resume was refused"
    res = run_in(cli, (*args, "--overwrite"), run)
    assert res.rc == 0, res.text
    fresh2 = tmp_path / "fresh2"
    fresh2.mkdir()
    assert run_in(cli, (*args, "--overwrite"), fresh2).rc == 0
    assert_same_output(out, fresh2 / "out")


@pytest.mark.slow
def test_raw_restored_after_refused_resume_resumes(cli, tmp_path: Path) -> None:
    """The refusal says "Restore RAW": after undoing the change the same command resumes to the uninterrupted bytes."""
    raw = tmp_path / "raw"
    _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, args, ref).rc == 0
    run = _interrupt(tmp_path, args)
    extra = png(raw / "dog" / "zz_new.png", color=(4, 4, 4))
    res = run_in(cli, args, run)
    if res.rc == 0:
        pytest.skip("resume over a changed RAW accepted (checked in test_raw_changed_between_kill_and_resume)")
    extra.unlink()
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")


def _table_tree(raw: Path, rows: int = 4000) -> list[tuple[str, int]]:
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


def _text_tree(raw: Path, lines: int = 4000) -> list[tuple[str, int]]:
    body = "".join(f"line {(i * 7919) % (lines // 2)}\n" if i % 50 else "\n" for i in range(1, lines + 1))
    write_text(raw / "a.txt", body)
    write_text(raw / "b.txt", b"ok\n\xff bad\nline 1\n")
    return [("a.txt", i) for i in range(1, lines + 1)] + [("b.txt", i) for i in (1, 2, 3)]


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("kind", ["table-dedup", "text-lines", "table-dedup-ranges", "text-lines-ranges"])
@pytest.mark.parametrize("point", ["first-shard", "fourth-shard", "rejects-published"])
def test_kill9_tables_and_text_resume_byte_identical(cli, tmp_path: Path, kind: str, point: str, workers: str) -> None:
    """Duplicates found before the kill stay rejected once, those after are found again: same bytes."""
    raw = tmp_path / "raw"
    if kind.startswith("table-dedup"):
        inputs = _table_tree(raw)
        extra: tuple[str, ...] = ("--dedup-on", "url", "--required", "id")
    else:
        inputs = _text_tree(raw)
        extra = ("--text-unit", "line")
    if kind.endswith("ranges"):  # line-based files in several parts, several ranges: duplicates across them
        extra += ("--range-size", "8KiB")
    args = ("shard", "../raw", "out", "--workers", workers, "--samples-per-shard", "200", "--no-progress", *extra)
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    killed = kill_when(args, run, KILL_POINTS[point](run / "out"))
    if point != "rejects-published":
        assert killed and not (run / "out" / MANIFEST).exists(), f"the run ended before the kill at {point}"
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    output = read_output(run / "out")
    assert_accounted(output, inputs)
    assert output.manifest["totals"]["rejected_by_reason"].get("duplicate", 0) > 100


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["images", "table-dedup"])
def test_killed_run_leaves_nothing_in_tmpdir(tmp_path: Path, kind: str) -> None:
    """Spills and temporary files live in OUT: a run killed with SIGKILL leaves nothing in $TMPDIR."""
    raw, tmpdir, run = tmp_path / "raw", tmp_path / "tmpdir", tmp_path / "run"
    tmpdir.mkdir(), run.mkdir()
    extra: tuple[str, ...] = ("--samples-per-shard", "3")
    if kind == "images":
        _kill_tree(raw)
    else:
        _table_tree(raw)
        extra = ("--dedup-on", "url", "--required", "id", "--samples-per-shard", "200")
    args = ("shard", "../raw", "out", "--workers", "2", "--no-progress", *extra)
    for point in ("fourth-shard", "never"):
        ready = KILL_POINTS[point](run / "out") if point != "never" else (lambda: False)
        kill_when(args, run, ready, env={"TMPDIR": str(tmpdir)})
        left = sorted(p.name for p in tmpdir.iterdir())
        assert not left, f"left in $TMPDIR after a run ({point}): {left}"


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_resume_notices_a_completed_shard_that_is_gone(cli, tmp_path: Path, damage: str) -> None:
    """A completed shard of a killed run is deleted or truncated (a cleanup, a full disk) before the rerun:
    the rerun rewrites it (the uninterrupted bytes) or refuses naming it; never exit 0 with a hole."""
    raw = tmp_path / "raw"
    _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, args, ref).rc == 0
    run = _interrupt(tmp_path, args)
    shard = sorted((run / "out").glob("*.tar"))[0]
    shard.unlink() if damage == "deleted" else os.truncate(shard, 512)
    res = run_in(cli, args, run)
    if res.rc == 0:
        assert_same_output(run / "out", ref / "out")
    else:
        assert shard.name in res.err and "Traceback" not in res.err, res.text
        assert not verify_ok(cli, run / "out")


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_rerun_of_finished_out_with_a_shard_gone_is_not_complete(cli, tmp_path: Path, damage: str) -> None:
    """A finished OUT loses a shard; rerunning the command must not answer "already complete" (exit 0)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=1)
    args = ("shard", raw, out, "--workers", "1", "--samples-per-shard", "2")
    assert cli(*args).rc == 0
    shard = sorted(out.glob("*.tar"))[0]
    shard.unlink() if damage == "deleted" else os.truncate(shard, 512)
    res = cli(*args)
    if res.rc == 0:
        status = res.out.strip().splitlines()[-1]
        assert verify_ok(cli, out), f"rerun exited 0 ({status!r}) over an OUT whose {shard.name} is {damage}"
        assert_accounted(read_output(out), inputs)
    else:
        assert shard.name in res.err, res.text


@pytest.mark.slow
def test_resume_with_other_workers_is_byte_identical(cli, tmp_path: Path) -> None:
    """--workers does not shape the output: a run killed with 2 workers resumes with 1 to the same bytes."""
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--samples-per-shard", "2", "--no-progress")
    ref = tmp_path / "ref"
    ref.mkdir()
    assert run_in(cli, (*args, "--workers", "2"), ref).rc == 0
    run = _interrupt(tmp_path, (*args, "--workers", "2"))
    res = run_in(cli, (*args, "--workers", "1"), run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
def test_kill9_during_an_overwrite_run(cli, tmp_path: Path) -> None:
    """Finished with one option, rerun with another and --overwrite, killed mid-way: rerunning the new command
    ends with exactly its output (nothing of the first run left)."""
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    old = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "3", "--no-progress")
    new = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress", "--overwrite")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, new, ref).rc == 0
    assert run_in(cli, old, run).rc == 0
    assert kill_when(new, run, _state_file(run / "out", "checkpoint.json"))
    for rerun in (new[:-1], new):  # without --overwrite (resume) or with it (start again)
        res = run_in(cli, rerun, run)
        if res.rc == 0:
            break
        assert res.rc == 2 and "--overwrite" in res.err, res.text
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out", drop_manifest_keys=("command",))
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("gone", ["a-shard", "the-index-of-a-shard", "the-manifest"])
def test_kill9_while_overwrite_removes_the_old_output(cli, tmp_path: Path, gone: str) -> None:
    """--overwrite over a finished OUT is killed while it removes the old files (as soon as one of them is
    gone): rerunning the same command must finish, not call the remaining shards "files dataprep did not
    write" and refuse even with --overwrite (the user could only delete them by hand)."""
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    old = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "1", "--no-progress")
    new = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "5", "--no-progress", "--overwrite")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, new, ref).rc == 0
    assert run_in(cli, old, run).rc == 0
    names = sorted(p.name for p in (run / "out").iterdir())
    watched = {"a-shard": [n for n in names if n.endswith(".tar")][5],
               "the-index-of-a-shard": [n for n in names if n.endswith(".idx")][5], "the-manifest": MANIFEST}[gone]
    kill_when(new, run, lambda: not (run / "out" / watched).exists())
    res = run_in(cli, new, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("point", LATE_KILL_POINTS)
def test_killed_at_the_end_then_overwrite_with_other_options(cli, tmp_path: Path, point: str) -> None:
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    old = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    new = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "5", "--no-progress", "--overwrite")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, new, ref).rc == 0
    kill_when(old, run, KILL_POINTS[point](run / "out"))
    res = run_in(cli, new, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")
    assert_accounted(read_output(run / "out"), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_raw_changed_while_the_run_is_running(cli, tmp_path: Path, workers: str) -> None:
    """Files deleted or rewritten under a running run (paused after its first checkpoint): the run ends with
    each input once (read before the change, or a reject), no traceback; the rerun does not call it complete."""
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", workers, "--samples-per-shard", "2", "--no-progress", "--no-shuffle")
    run = tmp_path / "run"
    run.mkdir()
    proc = start_cli(args, run)
    try:
        wait_until(proc, _shards_at_least(run / "out", 1))  # the writing child exists: no fork races the pause
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGSTOP)
        (raw / "dog" / "011.png").unlink()
        (raw / "dog" / "010.png").write_bytes(b"rewritten while the run was reading RAW")
        for _ in range(2):  # a second SIGCONT, in case a process was mid-fork at the first
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "Traceback" not in err, err
    assert proc.returncode == 0, err
    assert_accounted(read_output(run / "out"), inputs)
    res = run_in(cli, args, run)
    assert "already complete" not in res.out, res.text
    if res.rc != 0:
        assert "--overwrite" in res.err, res.text


@pytest.mark.slow
def test_second_run_into_an_out_in_use(cli, tmp_path: Path) -> None:
    """A run started while another one is writing the same OUT (the first is paused mid-run): either it is
    refused saying OUT is in use, or both finish; the result is the uninterrupted output either way."""
    raw = tmp_path / "raw"
    _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    first = start_cli(args, run, stdout=subprocess.DEVNULL)
    try:
        wait_until(first, _shards_at_least(run / "out", 2))
        os.killpg(first.pid, signal.SIGSTOP)
        assert first.poll() is None, "the first run ended before the second started"
        second = run_in(cli, args, run)
        for _ in range(2):  # a second SIGCONT, in case a process was mid-fork at the first
            os.killpg(first.pid, signal.SIGCONT)
            time.sleep(0.05)
        _, first_err = first.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    if second.rc != 0:
        assert any(w in second.err.lower() for w in ("in use", "another", "running", "lock")), second.err
        assert first.returncode == 0, first_err
    else:
        assert first.returncode == 0, f"the paused run failed after another run finished OUT: {first_err}"
    assert_same_output(run / "out", ref / "out")
    assert verify_ok(cli, run / "out")


def test_reject_budget_then_raw_fixed(cli, tmp_path: Path) -> None:
    """Stopped by --max-reject-fraction, the user deletes the broken files and reruns: refused naming them
    (with --overwrite as the way out) or the output of the fixed RAW; never the old rejects."""
    raw = tmp_path / "raw"
    inputs = image_tree(raw, {"cat": 3, "dog": 3}, broken=3)
    base = ("--workers", "1", "--samples-per-shard", "2", "--max-reject-fraction", "0.1")
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert cli("shard", raw, out, *base).rc == 1
    for i in range(3):
        (raw / "cat" / f"broken_{i}.jpg").unlink()
    res = cli("shard", raw, out, *base)
    if res.rc != 0:
        assert res.rc == 2 and "broken_0.jpg" in res.err and "--overwrite" in res.err, res.text
        res = cli("shard", raw, out, *base, "--overwrite")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.rejects == []
    assert_accounted(output, [i for i in inputs if "broken" not in i])
    assert cli("shard", raw, fresh, *base).rc == 0
    assert_same_output(out, fresh, drop_manifest_keys=("command",))


def test_finished_out_of_another_raw(cli, tmp_path: Path) -> None:
    raw_a, raw_b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    image_tree(raw_a, {"cat": 3, "dog": 3})
    inputs_b = image_tree(raw_b, {"eel": 2, "fox": 2}, broken=1)
    assert cli("shard", raw_a, out, "--workers", "1", "--samples-per-shard", "1").rc == 0
    first = output_bytes(out)
    res = cli("shard", raw_b, out, "--workers", "1", "--samples-per-shard", "1")
    if res.rc != 0:
        assert res.rc == 2 and "--overwrite" in res.err, res.text
        assert output_bytes(out) == first
        res = cli("shard", raw_b, out, "--workers", "1", "--samples-per-shard", "1", "--overwrite")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert set(output.manifest["label_map"]) == {"eel", "fox"}
    assert_accounted(output, inputs_b)


@pytest.mark.slow
@pytest.mark.parametrize("change", ["added", "removed", "modified-bigger"])
def test_followed_folder_outside_raw_changed_between_kill_and_resume(cli, tmp_path: Path, change: str) -> None:
    """With --follow-symlinks the files behind a link are inputs too: a change there is a change of RAW."""
    raw, ext = tmp_path / "raw", tmp_path / "elsewhere"
    image_tree(raw, {"cat": 6, "dog": 6}, size=(160, 120), fmt="png")
    image_tree(ext / "zebra", {"z": 12}, size=(160, 120), fmt="png")
    os.symlink(ext / "zebra" / "z", raw / "zebra")
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress",
            "--follow-symlinks")
    run = _interrupt(tmp_path, args)
    done = [src for src in _sources_in_first_shard(run / "out")]
    target = next((src for src in done if src.startswith("zebra/")), "zebra/000.png")
    if change == "added":
        png(ext / "zebra" / "z" / "new.png", size=(150, 100), color=(1, 2, 3))
    elif change == "removed":
        (ext / "zebra" / "z" / Path(target).name).unlink()
    else:
        png(ext / "zebra" / "z" / Path(target).name, size=(300, 200), color=(0, 0, 250))
    res = run_in(cli, args, run)
    if res.rc == 0:
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        assert run_in(cli, args, fresh).rc == 0
        assert_same_output(run / "out", fresh / "out")
    else:
        assert "--overwrite" in res.err and "zebra/" in res.err, res.text
        assert not verify_ok(cli, run / "out")


@pytest.mark.slow
@pytest.mark.parametrize("change", ["row-appended", "row-edited", "file-added"])
def test_table_changed_between_kill_and_resume(cli, tmp_path: Path, change: str) -> None:
    raw = tmp_path / "raw"
    _table_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "200", "--no-progress",
            "--dedup-on", "url", "--required", "id")
    run = _interrupt(tmp_path, args)
    if change == "row-appended":
        with open(raw / "a.csv", "a") as f:
            f.write("99999,u_new,1\n")
        changed = "a.csv"
    elif change == "row-edited":  # same size, other content
        data = (raw / "a.csv").read_bytes().replace(b"\n1,u", b"\n7,u", 1)
        (raw / "a.csv").write_bytes(data)
        changed = "a.csv"
    else:
        write_text(raw / "0_first.jsonl", '{"id": 1, "url": "u1", "v": 1}\n')
        changed = "0_first.jsonl"
    res = run_in(cli, args, run)
    if res.rc == 0:
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        assert run_in(cli, args, fresh).rc == 0
        assert_same_output(run / "out", fresh / "out")
    else:
        assert changed in res.err and "--overwrite" in res.err, res.text
        assert not verify_ok(cli, run / "out")


def test_schema_file_edited_after_a_finished_run(cli, tmp_path: Path) -> None:
    """`--schema @s.json` is the same argument, but the file now says otherwise: not "already complete"."""
    raw, out, schema = tmp_path / "raw", tmp_path / "out", tmp_path / "s.json"
    write_text(raw / "t.csv", "id,v\n1,2\n2,x\n3,4\n")
    schema.write_text('{"id": "int64", "v": "int64"}')
    args = ("shard", raw, out, "--workers", "1", "--schema", f"@{schema}")
    assert cli(*args).rc == 0
    assert len(read_output(out).rejects) == 1
    schema.write_text('{"id": "int64", "v": "string"}')
    res = cli(*args)
    if res.rc == 0:
        output = read_output(out)
        assert output.rejects == [] and len(output.samples) == 3
    else:
        assert res.rc == 2 and "--overwrite" in res.err and "schema" in res.err, res.text


@pytest.mark.parametrize("change", RAW_CHANGE_KINDS)
def test_raw_changed_after_a_finished_run(cli, tmp_path: Path, change: str) -> None:
    """Rerunning a finished command over a changed RAW never answers 'already complete' with the old output."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    _kill_tree(raw)
    args = ("shard", raw, out, "--workers", "1", "--samples-per-shard", "4")
    assert cli(*args).rc == 0
    old = output_bytes(out)
    time.sleep(0.01)
    _change_raw(raw, change, read_output(out).samples[0][0])
    res = cli(*args)
    if res.rc == 0:
        fresh = tmp_path / "fresh"
        assert cli("shard", raw, fresh, *args[3:]).rc == 0
        assert_same_output(out, fresh, drop_manifest_keys=("command", "options"))
    else:
        assert res.rc in (1, 2) and "--overwrite" in res.err, res.err
        assert output_bytes(out) == old


# ==================================================================================================
# 4. stray files and odd names in an image-folder tree


def test_stray_files_at_root_of_image_folder(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 3, "dog": 3})
    write_text(raw / "README.md", "# my photos\n")
    write_text(raw / "LICENSE", "CC-BY\n")
    # same stem, several image formats in one class folder: each its own sample
    png(raw / "cat" / "photo.png", color=(1, 100, 1))
    jpeg(raw / "cat" / "photo.jpg", color=(100, 1, 1))
    jpeg(raw / "dog" / "a.b with spaces.jpg", color=(5, 5, 200))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["layout"] == "image-folder", output.manifest.get("layout_reason")
    assert "image-folder" in res.out
    assert_accounted(output, [*inputs, "README.md", "LICENSE", "cat/photo.png", "cat/photo.jpg",
                              "dog/a.b with spaces.jpg"])
    kept = {s for s, _ in output.samples}
    assert {"cat/photo.png", "cat/photo.jpg", "dog/a.b with spaces.jpg"} <= kept
    reasons = {r["source"]: r["reason"] for r in output.rejects}
    assert reasons.keys() == {"README.md", "LICENSE"}, reasons


def test_images_at_the_root_and_class_names_that_look_alike(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"a b": 2, "a_b": 2, "A B": 1, "caf\u00e9": 1, "cafe\u0301": 1})
    jpeg(raw / "loose.jpg", color=(3, 3, 3))
    res = cli("shard", raw, out, "--workers", "1", "--layout", "image-folder")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [*inputs, "loose.jpg"])
    assert {r["source"]: r["reason"] for r in output.rejects} == {"loose.jpg": "bad_label"}
    assert sorted(output.manifest["label_map"]) == sorted(["a b", "a_b", "A B", "caf\u00e9", "cafe\u0301"])
    assert sorted(output.manifest["label_map"].values()) == list(range(5))
    label_of = dict(zip((src for src, _ in output.samples), output.labels))
    assert all(label_of[src] == src.split("/")[0] for src in inputs), label_of


def test_case_variants_of_one_name_are_each_accounted(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    for i, name in enumerate(("a.JPG", "a.jpg", "a.Jpg", "A.jpg")):
        jpeg(raw / "cat" / name, color=(10 * i, 200, 40))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["totals"]["inputs_seen"] == len(inputs) + 4
    assert_accounted(output, [*inputs, "cat/a.JPG", "cat/a.jpg", "cat/a.Jpg", "cat/A.jpg"])
    assert not output.rejects, output.rejects


def test_hidden_files_and_sidecars_without_extension(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    write_text(raw / ".DS_Store", b"\x00\x00\x00\x01Bud1")
    write_text(raw / "cat" / ".DS_Store", b"\x00\x00\x00\x01Bud1")
    jpeg(raw / "cat" / "b.jpg", color=(7, 7, 7))
    write_text(raw / "cat" / "b", "sidecar without extension")
    write_text(raw / "cat" / "c._meta", "{}")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    # hidden files may be rejects or not inputs at all, but never a sample and never twice
    hidden = {(".DS_Store", None), ("cat/.DS_Store", None)}
    assert not hidden & set(output.samples), output.samples
    assert all(identities(output)[h] <= 1 for h in hidden)
    visible = Output(output.manifest, [r for r in output.rejects if (r["source"], r.get("row")) not in hidden],
                     output.samples, output.labels)
    assert_accounted(visible, [*inputs, "cat/b.jpg", "cat/b", "cat/c._meta"])


def test_undecodable_file_and_folder_names(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    braw = os.fsencode(raw)
    bad_file = braw + b"/cat/caf\xe9.jpg"              # latin-1 name: not valid UTF-8
    bad_class = braw + b"/\xe9t\xe9"                   # a class folder whose name is not UTF-8
    bad_ext = braw + b"/dog/x.jp\xff"                  # an extension that is not UTF-8
    os.mkdir(bad_class)
    for path, color in ((bad_file, (1, 2, 250)), (bad_class + b"/one.jpg", (250, 2, 1))):
        buf = io.BytesIO()
        Image.new("RGB", (48, 40), color).save(buf, format="JPEG")
        with open(path, "wb") as f:
            f.write(buf.getvalue())
    with open(bad_ext, "wb") as f:
        f.write(b"unknown")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    names = [os.fsdecode(p[len(braw) + 1:]) for p in (bad_file, bad_class + b"/one.jpg", bad_ext)]
    assert_accounted(output, [*inputs, *names])
    assert len(output.manifest["label_map"]) == 3, output.manifest["label_map"]
    assert verify_ok(cli, out)


def test_follow_symlinks_keeps_the_class_of_the_target(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "zebra": 3})
    os.symlink("zebra", raw / "a_link")               # sorts before zebra
    outside = tmp_path / "elsewhere"
    jpeg(outside / "far.jpg", color=(33, 66, 99))
    os.symlink(outside, raw / "extra")
    res = cli("shard", raw, out, "--workers", "1", "--follow-symlinks")
    assert res.rc == 0, res.text
    output = read_output(out)
    got = identities(output)
    assert all(n == 1 for n in got.values()), [k for k, n in got.items() if n > 1]
    label_of = dict(zip((s for s, _ in output.samples), output.labels))
    for i in range(3):
        assert label_of.get(f"zebra/{i:03d}.jpg") == "zebra", (f"zebra/{i:03d}.jpg", label_of)
    assert label_of.get("extra/far.jpg") == "extra", label_of
    assert "zebra" in output.manifest["label_map"]
    for src in inputs:
        assert got[(src, None)] == 1, src


@pytest.mark.parametrize("link", ["to-out", "to-parent-of-raw-and-out"])
def test_follow_symlinks_never_reads_out(cli, tmp_path: Path, link: str) -> None:
    """With --follow-symlinks, a link in RAW that leads to OUT (or to a folder holding OUT) must not make
    dataprep read its own output or state as inputs; the rerun of the finished command is a no-op."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    if link == "to-out":
        os.symlink(out, raw / "cat" / "shards")             # dangling until OUT is made
    else:
        os.symlink(tmp_path, raw / "everything")
    args = ("shard", raw, out, "--workers", "1", "--follow-symlinks", "--layout", "image-folder")
    res = cli(*args)
    assert res.rc == 0, res.text
    output = read_output(out)
    read_back = sorted(src for src, _ in identities(output) if "out/" in src or "shards/" in src)
    assert not read_back, f"dataprep read its own OUT as input: {read_back}"
    for src in inputs:
        assert (src, None) in set(output.samples), src
    first = output_bytes(out)
    res = cli(*args)
    assert res.rc == 0, f"rerun of the finished command: {res.text}"
    assert output_bytes(out) == first


def test_symlink_leaving_raw_without_follow_is_a_reject(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    jpeg(tmp_path / "secret" / "s.jpg")
    os.symlink(tmp_path / "secret" / "s.jpg", raw / "cat" / "s.jpg")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [*inputs, "cat/s.jpg"])
    assert {r["source"]: r["reason"] for r in output.rejects} == {"cat/s.jpg": "symlink_outside"}


@pytest.mark.parametrize("fmt", ["wds", "parquet"])
def test_grouped_layout_with_bad_sidecars(cli, tmp_path: Path, fmt: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    jpeg(raw / "a" / "0001.jpg", color=(1, 2, 3))
    write_text(raw / "a" / "0001.txt", "caption one")
    write_text(raw / "a" / "0001.json", '{"k": 1}')
    jpeg(raw / "a" / "0002.jpg", color=(4, 5, 6))
    write_text(raw / "a" / "0002.json", "{bad json")
    write_text(raw / "a" / "0003.txt", "no media here")
    jpeg(raw / "b" / "0001.jpg", color=(7, 8, 9))
    write_text(raw / "b" / "0001.cls", "x")                  # not an integer
    png(raw / "b" / "0002.png", color=(10, 11, 12))
    write_text(raw / "b" / "0002.txt", b"\xff\xfe")          # not UTF-8
    jpeg(raw / "b" / "0003.jpg", color=(13, 14, 15))
    write_text(raw / "b" / "0003.cls", "3")
    write_text(raw / "b" / "0003", "a sidecar without extension")
    write_text(raw / "README", "hi")
    res = cli("shard", raw, out, "--workers", "1", "--layout", "grouped", "--format", fmt)
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["layout"] == "grouped"
    # each sample (files sharing a stem) is one input, named by its image; stray files are their own
    assert_accounted(output, ["a/0001.jpg", "a/0002.jpg", "a/0003.txt", "b/0001.jpg", "b/0002.png", "b/0003.jpg",
                              "b/0003", "README"])
    kept = {src for src, _ in output.samples}
    assert {"a/0001.jpg", "b/0003.jpg"} <= kept, kept


def test_names_that_sanitize_to_one_key_stay_distinct(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    names = ["cat/_x.jpg", "cat_/x.jpg", "cat/a b.jpg", "cat/a_b.jpg", "cat/a.b.jpg", "cat/a?b.jpg", "cat/a__b.jpg",
             "cat/line\nbreak.jpg", "cat/tab\there.jpg", 'cat/quote".jpg', "cat/back\\slash.jpg", "cat/-dash.jpg",
             "cat/\u00e9.jpg", "cat/e\u0301.jpg", "cat/A B.jpg", "cat_/_.jpg", "cat/..jpg.jpg"]
    for i, name in enumerate(names):
        jpeg(raw / name, color=(i * 13 % 256, 50, 60))
    for fmt in ("wds", "parquet"):
        res = cli("shard", raw, out / fmt, "--workers", "1", "--format", fmt)
        assert res.rc == 0, res.text
        output = read_output(out / fmt)  # also: every key unique across shards, a peer reads each sample
        got = identities(output)
        for name in names:
            if not Path(name).name.startswith("."):
                assert got[(name, None)] == 1, (name, got)
        assert verify_ok(cli, out / fmt)


def test_special_files_and_symlinks_inside_raw(cli, tmp_path: Path) -> None:
    """A FIFO (opening it would block), a dangling link, a link loop, an empty file, a deeper folder: each
    accounted once, no hang, no traceback."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    os.mkfifo(raw / "cat" / "pipe.jpg")
    os.symlink("nowhere.jpg", raw / "cat" / "dangling.jpg")
    os.symlink("..", raw / "dog" / "loop")
    write_text(raw / "cat" / "empty.jpg", b"")
    jpeg(raw / "cat" / "sub.jpg" / "deep.jpg", color=(1, 1, 1))
    (raw / "empty_class").mkdir()
    for extra in ((), ("--follow-symlinks",)):
        res = cli("shard", raw, out, "--workers", "1", "--layout", "image-folder", "--overwrite", *extra)
        assert res.rc == 0, res.text
        output = read_output(out)
        got = identities(output)
        assert all(n == 1 for n in got.values()), [k for k, n in got.items() if n > 1]
        for src in [*inputs, "cat/pipe.jpg", "cat/dangling.jpg", "cat/empty.jpg", "cat/sub.jpg/deep.jpg"]:
            assert got[(src, None)] == 1, (src, sorted(got))
        assert not any(src.startswith("dog/loop/") for src, _ in got), sorted(got)
        reasons = {r["source"]: r["reason"] for r in output.rejects}
        assert reasons["cat/empty.jpg"] == "empty_file" and "cat/pipe.jpg" in reasons, reasons


def test_file_symlink_inside_raw_does_not_relabel_its_target(cli, tmp_path: Path) -> None:
    """`cat/alias.jpg -> ../dog/000.jpg`: the dog photo stays a dog. As with a linked folder, the real file is
    the sample and the link is the duplicate, whichever sorts first."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    os.symlink("../dog/000.jpg", raw / "cat" / "alias.jpg")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [*inputs, "cat/alias.jpg"])
    label_of = dict(zip((src for src, _ in output.samples), output.labels))
    assert label_of.get("dog/000.jpg") == "dog", f"dog/000.jpg kept as {label_of.get('dog/000.jpg')!r}; " \
                                                 f"rejects: {output.rejects}"


@pytest.mark.parametrize("extra", [(), ("--resize-short", "32"), ("--format", "parquet"),
                                   ("--format", "parquet", "--row-group-size", "1KiB"), ("--shard-size", "1KiB")],
                         ids=["plain", "resize", "parquet", "parquet-tiny-row-groups", "samples-bigger-than-a-shard"])
def test_every_kept_image_decodes_as_rgb_at_its_recorded_size(cli, tmp_path: Path, extra: tuple[str, ...]) -> None:
    """Gray, palette, RGBA, CMYK, 16-bit, LA, WebP, TIFF, BMP, GIF, an EXIF-rotated JPEG, a truncated JPEG: each
    kept one decodes (as a peer would) to RGB of the width/height its metadata says; the truncated one is a reject."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    (raw / "a").mkdir(parents=True), (raw / "b").mkdir()
    Image.new("L", (64, 50), 100).save(raw / "a" / "gray.png")
    Image.new("P", (64, 50), 3).save(raw / "a" / "pal.png")
    Image.new("RGBA", (64, 50), (255, 0, 0, 128)).save(raw / "a" / "rgba.png")
    Image.new("CMYK", (64, 50), (0, 100, 100, 0)).save(raw / "a" / "cmyk.jpg")
    Image.new("I;16", (64, 50), 30000).save(raw / "b" / "sixteen.png")
    Image.new("LA", (64, 50), (50, 200)).save(raw / "b" / "la.png")
    Image.new("RGB", (64, 50), (1, 2, 3)).save(raw / "b" / "x.webp")
    Image.new("RGB", (64, 50), (1, 2, 4)).save(raw / "b" / "x.tiff")
    Image.new("RGB", (64, 50), (1, 2, 5)).save(raw / "b" / "x.bmp")
    frames = [Image.new("RGB", (64, 50), (i * 50, 0, 0)) for i in range(3)]
    frames[0].save(raw / "b" / "anim.gif", save_all=True, append_images=frames[1:])
    buf = io.BytesIO()
    Image.new("RGB", (200, 150), (9, 9, 9)).save(buf, format="JPEG")
    write_text(raw / "b" / "trunc.jpg", buf.getvalue()[:-200])
    rot = Image.new("RGB", (80, 40), (0, 200, 0))
    exif = rot.getexif()
    exif[0x0112] = 6  # rotate 90: displayed 40 x 80
    rot.save(raw / "b" / "rot.jpg", exif=exif)
    res = cli("shard", raw, out, "--workers", "2", *extra)
    assert res.rc == 0, res.text
    output = read_output(out)
    assert {r["source"]: r["reason"] for r in output.rejects} == {"b/trunc.jpg": "truncated"}
    assert len(output.samples) == 11
    assert all(shard["num_samples"] > 0 for shard in output.manifest["shards"]), "an empty shard"
    decoded = {}
    for shard in output.manifest["shards"]:
        path = out / shard["name"]
        if path.suffix == ".tar":
            import webdataset as wds
            rows = [(json.loads(x["json"]), x.get("jpg") or x.get("png")) for x in
                    wds.WebDataset(str(path), shardshuffle=False, empty_check=False)]
        else:
            table = pq.read_table(path).to_pylist()
            rows = [(json.loads(r["json"]), r.get("jpg") or r.get("png")) for r in table]
        for meta, data in rows:
            assert data, meta
            img = Image.open(io.BytesIO(data))
            img.load()
            decoded[meta["__source__"]] = (img.mode, img.size, (meta.get("width"), meta.get("height")))
    for src, (mode, size, recorded) in decoded.items():
        assert mode == "RGB" and size == recorded, (src, mode, size, recorded)
        if "--resize-short" in extra:
            assert min(size) == 32, (src, size)
    assert decoded["b/rot.jpg"][1] == ((40, 80) if not extra or extra[0] != "--resize-short" else (32, 64))


def test_json_sidecar_cannot_contradict_the_generated_metadata(cli, tmp_path: Path) -> None:
    """`cat/a.json` saying {"label": "dog", "width": 5, "__source__": ...}: the sample must not carry a label
    that contradicts its cls, a width that is not the image's, or another source (or it is a bad_metadata reject)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2, "dog": 2})
    write_text(raw / "cat" / "000.json", json.dumps({"__source__": "dog/000.jpg", "label": "dog", "width": 5,
                                                     "height": 7, "caption": "a cat"}))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, inputs)
    if ("cat/000.jpg", None) in set(output.samples):
        import webdataset as wds

        index_to_label = {v: k for k, v in output.manifest["label_map"].items()}
        for shard in output.manifest["shards"]:
            for sample in wds.WebDataset(str(out / shard["name"]), shardshuffle=False, empty_check=False):
                meta = json.loads(sample["json"])
                size = Image.open(io.BytesIO(sample["jpg"])).size
                assert meta["label"] == index_to_label[int(sample["cls"])], meta
                assert (meta["width"], meta["height"]) == size, (meta, size)


def _png_header_only(path: Path, width: int, height: int) -> None:
    """A PNG whose header claims ``width`` x ``height`` with almost no pixel data (a decompression bomb's shape)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    write_text(path, b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 100))
               + chunk(b"IEND", b""))


def test_pixel_bombs_are_rejected_from_the_header(cli, tmp_path: Path) -> None:
    """Over --max-pixels (default) but under Pillow's own bomb limit, and far over it: too_large, found from the
    header (a decode would take seconds and fail as corrupt)."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    inputs = image_tree(raw, {"cat": 2})
    _png_header_only(raw / "cat" / "big.png", 12_000, 12_000)
    _png_header_only(raw / "cat" / "huge.png", 60_000, 60_000)
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [*inputs, "cat/big.png", "cat/huge.png"])
    assert {r["source"]: r["reason"] for r in output.rejects} == {"cat/big.png": "too_large", "cat/huge.png": "too_large"}


# ==================================================================================================
# 5. tables


def test_csv_tsv_jsonl_bad_rows_each_accounted(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "a.csv", 'id,name,score\n1,a,1.5\n2,b,x\n3,,2.0\n4,d\n5,"unclosed,3\n6,f,6.0\n')
    write_text(raw / "b.tsv", "id\tname\tscore\n7\tg\t7.0\n8\th\t8.0\textra\n9\ti\t9.0\n")
    write_text(raw / "c.jsonl", '{"id": 10, "name": "j", "score": 1}\n{bad\n[1, 2]\n'
                                '{"id": "eleven", "name": "k", "score": 2}\n{"id": 12, "name": "l", "score": 3}\n')
    write_text(raw / "d.csv", b"id,name,score\n13,m\xe9,1.0\n14,n,2.0\n")
    res = cli("shard", raw, out, "--workers", "1", "--schema", '{"id": "int64", "name": "string", "score": "double"}')
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["layout"] == "table"
    expected = [*(("a.csv", i) for i in range(1, 7)), *(("b.tsv", i) for i in range(1, 4)),
                *(("c.jsonl", i) for i in range(1, 6)), ("d.csv", 1), ("d.csv", 2)]
    got = identities(output)
    # an unclosed quote may swallow the rest of its file as one bad row; every row still ends once
    if ("a.csv", 6) not in got:
        expected.remove(("a.csv", 6))
    assert_accounted(output, expected)
    kept = {s for s in output.samples}
    assert {("a.csv", 1), ("b.tsv", 1), ("b.tsv", 3), ("c.jsonl", 1), ("c.jsonl", 5), ("d.csv", 2)} <= kept
    for r in output.rejects:
        assert r.get("row") is not None and r["detail"], r


def test_tsv_alone_is_a_table(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "t.tsv", "id\tname\n1\ta\n2\tb\n")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["layout"] == "table", output.manifest.get("layout_reason")
    assert_accounted(output, [("t.tsv", 1), ("t.tsv", 2)])


def test_single_table_file_as_raw(cli, tmp_path: Path) -> None:
    write_text(tmp_path / "t.csv", "id,name\n1,a\n2,b\n")
    out = tmp_path / "out"
    res = cli("shard", tmp_path / "t.csv", out, "--workers", "1")
    assert res.rc == 0, res.text
    assert_accounted(read_output(out), [("t.csv", 1), ("t.csv", 2)])


def test_table_edge_files_each_row_once(cli, tmp_path: Path) -> None:
    """BOM + CRLF, a header without rows, blank JSONL lines, no final newline, a header naming a column twice,
    an empty file, a Parquet input: every data row accounted once, no traceback."""
    import pyarrow as pa

    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "bom.csv", b"\xef\xbb\xbfid,name\r\n1,a\r\n2,b\r\n")
    write_text(raw / "header_only.csv", "id,name\n")
    write_text(raw / "blank.jsonl", '{"id": 3, "name": "c"}\n\n{"id": 4, "name": "d"}\n   \n{"id": 5, "name": "e"}')
    write_text(raw / "dupcol.csv", "id,id,name\n6,7,f\n")
    write_text(raw / "empty.csv", "")
    pq.write_table(pa.table({"id": [8, 9], "name": ["h", None]}), raw / "p.parquet")
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 0, res.text
    output = read_output(out)
    got = identities(output)
    assert all(n == 1 for n in got.values()), got
    for row in [("bom.csv", 1), ("bom.csv", 2), ("blank.jsonl", 1), ("blank.jsonl", 3), ("blank.jsonl", 5),
                ("p.parquet", 1)]:
        assert row in set(output.samples), (row, output.samples)
    assert ("p.parquet", 2) in got
    assert any(src == "dupcol.csv" for src, _ in got) and any(src == "empty.csv" for src, _ in got), got
    assert {"id", "name"} <= {f["name"] for f in output.manifest["schema"]}


def test_dedup_on_missing_column_is_refused(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "t.csv", "id,url\n1,a\n2,b\n3,c\n")
    res = cli("shard", raw, out, "--workers", "1", "--dedup-on", "uri")
    assert res.rc == 2, res.text
    assert "uri" in res.err and "url" in res.err, f"name the missing column and the ones there are: {res.err}"
    assert not (out / MANIFEST).exists()


@pytest.mark.parametrize(("layout", "option"), [("image-folder", ("--dedup-on", "url")),
                                                 ("text", ("--schema", '{"id": "int64"}'))])
def test_table_options_on_a_raw_without_tables_are_refused(cli, tmp_path: Path, layout: str,
                                                            option: tuple[str, str]) -> None:
    """`--dedup-on url` over an image folder dedups nothing: silently ignoring it exits 0 on a run that did not
    do what was asked. Minor: a usage error naming the option and the layout is expected."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    if layout == "image-folder":
        image_tree(raw, {"cat": 2, "dog": 2})
    else:
        write_text(raw / "a.txt", "hello\n")
    res = cli("shard", raw, out, "--workers", "1", *option)
    assert res.rc == 2, f"{option[0]} accepted over a RAW of layout {layout}: {res.text}"
    assert option[0] in res.err, res.err


def test_dedup_nulls_are_not_duplicates(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "t.csv", "id,url\n1,\n2,x\n3,\n4,x\n5,\n6,y\n")
    res = cli("shard", raw, out, "--workers", "1", "--dedup-on", "url", "--required", "id")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [("t.csv", i) for i in range(1, 7)])
    assert [(r["row"], r["reason"]) for r in output.rejects] == [(4, "duplicate")], output.rejects


def test_dedup_across_files_and_jsonl_nulls(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "a.jsonl", '{"id": 1, "url": null}\n{"id": 2, "url": "x"}\n{"id": 3}\n')
    write_text(raw / "b.jsonl", '{"id": 4, "url": null}\n{"id": 5, "url": "x"}\n')
    res = cli("shard", raw, out, "--workers", "1", "--dedup-on", "url", "--required", "id")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert_accounted(output, [("a.jsonl", 1), ("a.jsonl", 2), ("a.jsonl", 3), ("b.jsonl", 1), ("b.jsonl", 2)])
    assert [(r["source"], r["row"], r["reason"]) for r in output.rejects] == [("b.jsonl", 2, "duplicate")]


def test_single_jpeg_as_raw_is_refused(cli, tmp_path: Path) -> None:
    img = jpeg(tmp_path / "photo.jpg")
    out = tmp_path / "out"
    res = cli("shard", img, out, "--workers", "1")
    assert res.rc == 2, res.text
    assert "photo.jpg" in res.err, res.err
    assert not (out / MANIFEST).exists()


def test_missing_raw_is_refused(cli, tmp_path: Path) -> None:
    res = cli("shard", tmp_path / "nope", tmp_path / "out", "--workers", "1")
    assert res.rc == 2 and "nope" in res.err, res.text
    assert not (tmp_path / "out").exists()


def test_text_files_with_colliding_stems(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    names = ["a.txt", "sub/a.txt", "a b.txt", "a_b.txt", "a.md", "sub_a.txt", "A.txt"]
    for i, name in enumerate(names):
        write_text(raw / name, f"text number {i}\nsecond line {i}\n")
    write_text(raw / "empty.txt", "")
    write_text(raw / "bom.txt", b"\xef\xbb\xbftext number 0\nsecond line 0\n")   # same text as a.txt after the BOM
    for unit in ("file", "line"):
        res = cli("shard", raw, out / unit, "--workers", "1", "--text-unit", unit)
        assert res.rc == 0, res.text
        output = read_output(out / unit)  # keys unique across shards
        sources = {src for src, _ in identities(output)}
        assert set(names) | {"bom.txt"} <= sources, sources
        kept = {src for src, _ in output.samples}
        assert set(names) <= kept, kept
        assert output.manifest["totals"]["rejected_by_reason"].get("duplicate") in (1, 2), output.rejects


def _rows(out: Path) -> list[tuple]:
    """Every Parquet row of OUT (all columns but the key), shard after shard."""
    rows = []
    for shard in json.loads((out / MANIFEST).read_text())["shards"]:
        for row in pq.read_table(out / shard["name"]).to_pylist():
            rows.append(tuple(sorted((k, v) for k, v in row.items() if k != "__key__")))
    return rows


def _line_files(raw: Path) -> None:
    """A text file with every kind of line separator and no final newline; a JSONL with CRLF, escaped
    newlines, U+2028 inside strings, blank lines and one line longer than a part."""
    seps = ["\n", "\r\n", "\r", "\u2028", "\x0c", "\x85"]
    text = "".join(f"line {i} padded to make the file a few parts long{seps[i % 6]}" for i in range(400))
    write_text(raw / "a.txt", text + "last line, no newline")
    jl = "".join(json.dumps({"id": i, "s": f"x\ny {i}\u2028"}) + ("\r\n" if i % 2 else "\n") for i in range(400))
    write_text(raw / "b.jsonl", jl + "\n\n" + json.dumps({"id": 9999, "s": "z" * 5000}))


@pytest.mark.parametrize("file", ["a.txt", "b.jsonl"])
def test_line_files_split_into_parts_give_the_same_rows(cli, tmp_path: Path, file: str) -> None:
    """A line-based file planned as several parts (small --range-size) yields exactly the rows it yields
    whole: no line lost or doubled at a part boundary, the same row numbers."""
    raw = tmp_path / "raw"
    _line_files(raw)
    extra = ("--text-unit", "line") if file.endswith(".txt") else ()
    outs = {}
    for size in ("4GiB", "2KiB"):
        outs[size] = tmp_path / size
        res = cli("shard", raw / file, outs[size], "--workers", "2", "--range-size", size, *extra)
        assert res.rc == 0, res.text
        read_output(outs[size])
    assert len(json.loads((outs["2KiB"] / MANIFEST).read_text())["shards"]) > 3
    whole, split = _rows(outs["4GiB"]), _rows(outs["2KiB"])
    assert sorted(whole) == sorted(split), (len(whole), len(split))


@pytest.mark.parametrize("kind", ["table-dedup", "text-lines"])
def test_ranges_do_not_change_which_rows_are_kept(cli, tmp_path: Path, kind: str) -> None:
    """Splitting the plan into ranges (and line-based files into parts) changes shard names, never which rows
    are kept or rejected: duplicates are found against every earlier position, across ranges."""
    raw = tmp_path / "raw"
    if kind == "table-dedup":
        _table_tree(raw, rows=1500)
        extra: tuple[str, ...] = ("--dedup-on", "url", "--required", "id")
    else:
        _text_tree(raw, lines=1500)
        extra = ("--text-unit", "line")
    results = []
    for size in ("4GiB", "4KiB"):
        out = tmp_path / size
        res = cli("shard", raw, out, "--workers", "2", "--range-size", size, *extra)
        assert res.rc == 0, res.text
        output = read_output(out)
        rejects = sorted((r["source"], r.get("row"), r["reason"]) for r in output.rejects)
        results.append((sorted(_rows(out)), rejects))
    assert len({s["name"].split("-")[1] for s in json.loads((tmp_path / "4KiB" / MANIFEST).read_text())["shards"]}) > 2
    assert results[0][1] == results[1][1], "rejects differ with ranges"
    assert results[0][0] == results[1][0], "kept rows differ with ranges"


@pytest.mark.slow
@pytest.mark.parametrize("point", ["first-shard", "fourth-shard"])
def test_kill9_with_split_line_files_resumes_byte_identical(cli, tmp_path: Path, point: str) -> None:
    raw = tmp_path / "raw"
    _line_files(raw)
    _text_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "2", "--range-size", "2KiB", "--text-unit", "line",
            "--layout", "text", "--no-progress")
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir(), run.mkdir()
    assert run_in(cli, args, ref).rc == 0
    kill_when(args, run, KILL_POINTS[point](run / "out"))
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_same_output(run / "out", ref / "out")


MIXED_EXPECTED = {
    "image-folder": ["cat/a.jpg", "dog/b.jpg", "cat/t.csv", "d.jsonl", "notes.txt"],
    "grouped": ["cat/a.jpg", "dog/b.jpg", "cat/t.csv", "d.jsonl", "notes.txt"],
    "table": [("cat/t.csv", 1), ("cat/t.csv", 2), ("d.jsonl", 1), "cat/a.jpg", "dog/b.jpg", "notes.txt"],
    "text": [("notes.txt", 1), ("notes.txt", 2), "cat/a.jpg", "dog/b.jpg", "cat/t.csv", "d.jsonl"],
}


@pytest.mark.parametrize("layout", sorted(MIXED_EXPECTED))
def test_mixed_raw_is_refused_then_each_forced_layout_accounts_everything(cli, tmp_path: Path, layout: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    jpeg(raw / "cat" / "a.jpg", color=(1, 2, 3))
    jpeg(raw / "dog" / "b.jpg", color=(1, 2, 9))
    write_text(raw / "cat" / "t.csv", "id\n1\n2\n")
    write_text(raw / "notes.txt", "hello\nworld\n")
    write_text(raw / "d.jsonl", '{"id": 3}\n')
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 2 and "--layout" in res.err, res.text
    extra = ("--text-unit", "line") if layout == "text" else ()
    res = cli("shard", raw, out, "--workers", "1", "--layout", layout, *extra)
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.manifest["layout"] == layout
    assert_accounted(output, MIXED_EXPECTED[layout])


# ==================================================================================================
# 6. nothing kept


def test_every_input_rejected_fails_unless_allowed(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    for i in range(3):
        write_text(raw / "cat" / f"{i}.jpg", b"garbage" * (i + 1))
        write_text(raw / "dog" / f"{i}.jpg", b"rubbish" * (i + 1))
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc == 1, res.text
    assert "--allow-empty" in res.err, res.err
    assert not (out / MANIFEST).exists()
    assert not verify_ok(cli, out)
    assert len(read_rejects(out)) == 6
    res = cli("shard", raw, out, "--workers", "1", "--allow-empty")
    assert res.rc == 0, res.text
    output = read_output(out)
    assert output.samples == []
    assert_accounted(output, [f"{c}/{i}.jpg" for c in ("cat", "dog") for i in range(3)])


def test_every_row_rejected_fails(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "t.csv", "id,name\nx,a\ny,b\n")
    res = cli("shard", raw, out, "--workers", "1", "--schema", '{"id": "int64", "name": "string"}')
    assert res.rc == 1, res.text
    assert not (out / MANIFEST).exists()


@pytest.mark.parametrize("layout", ["table", "text", "grouped"])
def test_no_input_of_the_chosen_layout_fails(cli, tmp_path: Path, layout: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 2, "dog": 2}) if layout != "grouped" else write_text(raw / "t.csv", "a\n1\n")
    res = cli("shard", raw, out, "--workers", "1", "--layout", layout)
    assert res.rc != 0, res.text
    assert "Traceback" not in res.err and res.err.strip(), res.text
    assert not (out / MANIFEST).exists() or not verify_ok(cli, out)


def test_a_dataprep_output_as_raw_is_refused(cli, tmp_path: Path) -> None:
    """Resharding an existing output (`dataprep shard shards/ shards2/ --shard-size 1GiB`) must not turn its
    rejects.jsonl into a one-file table dataset, reject the shards as strays and exit 0."""
    old = _finished(cli, tmp_path)
    new = tmp_path / "new"
    res = cli("shard", old, new, "--workers", "1")
    assert res.rc != 0, f"exit 0 over a RAW that is a dataprep output: {res.text}"
    assert "manifest.json" in res.err or ".tar" in res.err, res.err
    swapped = cli("shard", old, tmp_path / "raw", "--workers", "1")   # arguments swapped: RAW given as OUT
    assert swapped.rc == 2, swapped.text


def test_empty_raw_fails(cli, tmp_path: Path) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    res = cli("shard", raw, out, "--workers", "1")
    assert res.rc != 0, res.text
    assert str(raw) in res.err, res.err
    assert not (out / MANIFEST).exists()


def test_raw_with_only_stray_files_fails_unless_allow_empty(cli, tmp_path: Path) -> None:
    """`--allow-empty`: "succeed even when no sample is kept (every input rejected, or none found)"."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "README.md", "nothing here yet")
    res = cli("shard", raw, out, "--workers", "1", "--layout", "image-folder")
    assert res.rc != 0, res.text
    assert not (out / MANIFEST).exists()
    res = cli("shard", raw, out, "--workers", "1", "--layout", "image-folder", "--allow-empty")
    assert res.rc == 0, res.text
    assert_accounted(read_output(out), ["README.md"])


# ==================================================================================================
# 6b. verify never says OK on wrong output; bad options are named


def _finished(cli, tmp_path: Path) -> Path:
    raw, out = tmp_path / "raw", tmp_path / "out"
    image_tree(raw, {"cat": 3, "dog": 3}, broken=2)
    assert cli("shard", raw, out, "--workers", "1", "--samples-per-shard", "2").rc == 0
    assert verify_ok(cli, out)
    return out


def _flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


TAMPERING = {
    "shard-byte": lambda out: _flip_byte(sorted(out.glob("*.tar"))[1], 1000),
    "shard-deleted": lambda out: sorted(out.glob("*.tar"))[0].unlink(),
    "shard-truncated": lambda out: os.truncate(sorted(out.glob("*.tar"))[0], 1024),
    "index-byte": lambda out: _flip_byte(sorted(out.glob("*.idx"))[0], 80),
    "index-deleted": lambda out: sorted(out.glob("*.idx"))[0].unlink(),
    "reject-line-removed": lambda out: (out / REJECTS).write_text(
        "".join((out / REJECTS).read_text().splitlines(keepends=True)[1:])),
    "rejects-deleted": lambda out: (out / REJECTS).unlink(),
    "manifest-count": lambda out: (out / MANIFEST).write_text(
        (out / MANIFEST).read_text().replace('"num_samples": 2', '"num_samples": 3', 1)),
    "rejects-nul-padded": lambda out: (out / REJECTS).write_bytes((out / REJECTS).read_bytes() + b"\x00" * 300),
    "reject-line-doubled": lambda out: (out / REJECTS).write_text(
        (out / REJECTS).read_text() + (out / REJECTS).read_text().splitlines(keepends=True)[0]),
    "stray-shard-copy": lambda out: (out / "shard-00000-000099.tar").write_bytes(
        sorted(out.glob("*.tar"))[0].read_bytes()),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERING))
def test_verify_catches_tampering(cli, tmp_path: Path, tamper: str) -> None:
    out = _finished(cli, tmp_path)
    TAMPERING[tamper](out)
    res = cli("verify", out)
    assert res.rc == 1, res.text
    assert "FAILED" in res.out or res.err.strip(), res.text


@pytest.mark.slow
def test_index_refuses_an_interrupted_shard_run(cli, tmp_path: Path) -> None:
    """`dataprep index` over a killed `dataprep shard` OUT must not adopt its partial shards as a complete
    dataset (verify would then say OK on a fraction of the samples, and the shard run could not resume)."""
    raw = tmp_path / "raw"
    inputs = _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = _interrupt(tmp_path, args)
    res = run_in(cli, ("index", "out"), run)
    assert res.rc != 0, f"index adopted an unfinished shard run: {res.text}"
    assert "dataprep shard" in res.err or "rerun" in res.err, res.err
    assert not verify_ok(cli, run / "out")
    res = run_in(cli, args, run)
    assert res.rc == 0, res.text
    assert_accounted(read_output(run / "out"), inputs)


def test_index_refuses_a_finished_shard_output(cli, tmp_path: Path) -> None:
    out = _finished(cli, tmp_path)
    before = snapshot(out)
    res = cli("index", out)
    assert res.rc != 0 and "manifest" in res.err, res.text
    assert snapshot(out) == before


@pytest.mark.slow
def test_verify_and_info_on_an_interrupted_out(cli, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _kill_tree(raw)
    args = ("shard", "../raw", "out", "--workers", "1", "--samples-per-shard", "2", "--no-progress")
    run = _interrupt(tmp_path, args)
    for command in ("verify", "info"):
        res = cli(command, run / "out")
        assert res.rc != 0, res.text
        assert "did not finish" in res.err or "rerun" in res.err, res.err


@pytest.mark.parametrize(("option", "value"), [
    ("--shard-size", "0"), ("--shard-size", "12 parsecs"), ("--samples-per-shard", "0"), ("--workers", "0"),
    ("--max-reject-fraction", "1.5"), ("--max-reject-fraction", "-0.1"), ("--quality", "0"), ("--quality", "101"),
    ("--resize-short", "-5"), ("--row-group-size", "0"), ("--range-size", "0"), ("--schema", "{not json"),
    ("--schema", "@/nonexistent/schema.json"), ("--schema", '{"id": "complex128"}'), ("--prefix", "../evil"),
    ("--prefix", "a/b"), ("--prefix", ""),
])
def test_bad_option_values_are_named(cli, tmp_path: Path, option: str, value: str) -> None:
    raw, out = tmp_path / "raw", tmp_path / "out"
    write_text(raw / "t.csv", "id\n1\n")
    res = cli("shard", raw, out, "--workers", "1", f"{option}={value}")
    assert res.rc == 2, res.text
    assert option in res.err or option.lstrip("-").replace("-", "_") in res.err, res.err
    assert not (out / MANIFEST).exists()
    assert not (tmp_path / "evil").exists() and not any(tmp_path.glob("*evil*"))


# ==================================================================================================
# 7. determinism


def test_same_raw_twice_is_byte_identical(cli, tmp_path: Path) -> None:
    """Two runs of one command (same relative paths, so the same command line): every byte equal."""
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 4, "dog": 4, "eel": 3}, broken=2)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        assert run_in(cli, ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "3"), tmp_path / name).rc == 0
    assert_same_output(tmp_path / "a" / "out", tmp_path / "b" / "out")


@pytest.mark.parametrize("kind", ["images", "images-parquet", "grouped", "table", "text-lines", "text-files"])
def test_workers_do_not_change_output(cli, tmp_path: Path, kind: str) -> None:
    raw = tmp_path / "raw"
    extra: tuple[str, ...] = ("--samples-per-shard", "3")
    if kind.startswith("images"):
        image_tree(raw, {"cat": 4, "dog": 4}, broken=2)
        jpeg(raw / "dog" / "copy.jpg", size=(48, 40), color=(0, 0, 90))   # a duplicate of cat/000.jpg
        extra += ("--format", "parquet") if kind == "images-parquet" else ()
    elif kind == "grouped":
        _grouped_tree(raw, n=10)
        extra += ("--layout", "grouped")
    elif kind == "table":
        write_text(raw / "a.csv", "id,v\n" + "".join(f"{i},{i % 4}\n" for i in range(20)) + "x,1\n")
        write_text(raw / "b.jsonl", "".join(f'{{"id": {i}, "v": {i % 3}}}\n' for i in range(15)))
        extra += ("--dedup-on", "v")
    else:
        write_text(raw / "a.txt", "".join(f"line {i % 7}\n" for i in range(30)))
        write_text(raw / "b.txt", "alpha\n\nbeta\n\xff\n".encode("latin-1"))
        write_text(raw / "c.txt", "line 1\n")
        extra += ("--text-unit", kind.split("-")[1].rstrip("s"))
    outs = []
    for workers in ("1", "2", "5"):  # 5: more workers than cores
        out = tmp_path / f"out{workers}"
        res = cli("shard", raw, out, "--workers", workers, *extra)
        assert res.rc == 0, res.text
        outs.append(out)
    for other in outs[1:]:
        assert_same_output(other, outs[0], drop_manifest_keys=("command",))
    output = read_output(outs[0])
    assert output.rejects, "the tree should hold rejects"
    info = cli("info", outs[0], "--json")
    assert info.rc == 0, info.text
    doc = json.loads(info.out)
    assert doc["samples"] == len(output.samples) and doc["totals"]["rejected"] == len(output.rejects), doc
    assert cli("verify", outs[0]).rc == 0
