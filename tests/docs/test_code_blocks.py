"""Every ```python, ```bash and ```sh block of README.md and docs/*.md runs, so the front door cannot go stale.

The convention (also docs/contributing.md):

- Each page runs in a fresh directory of its own; its blocks run there in document order (a bash block that
  builds ``shards/`` is seen by the python block after it).
- A python block is a whole program, run as ``python block.py`` would run it (this interpreter), cwd = the
  page's directory; to spare each block the import of torch it runs in a child forked from one interpreter
  that has imported torch and this repository's packages (tests/docs/runner.py).
  A bash / sh block: ``bash -euo pipefail block.sh``, this interpreter's bin first on PATH (``dataprep``,
  ``python``, ``torchrun``), PYTHONPATH = the repository root, ``examples/`` linked into the directory,
  ``SHARDFEED_REPO`` = the repository root, ``SHARDFEED_DOCS_TEST=1``. A non-zero exit fails the page.
- ```text (output), unlabelled and other fences are not run; ``<!-- not run: REASON -->`` on the line right
  before a fence skips that block (CUDA only, a cluster, a bucket of your own).
- The directory holds small stand-ins for "your own data" (``DATA`` below): ``raw/`` (an ImageNet-style
  folder: 4 class folders, 40 photo-like JPEGs and 8 broken inputs), ``corpus.jsonl.zst`` (200 JSON-lines
  documents, ``{"text": ...}``), ``tokenizer.json`` (a byte-level BPE of 2,000 ids for it), ``tables/``
  (CSV and JSON lines), and, prepared, ``shards/`` (``dataprep shard raw/ shards/ --resize-short 64``) and
  ``lm-tokens/`` (``dataprep shard corpus.jsonl.zst lm-tokens/ --tokenizer tokenizer.json``). A prepared
  output that a bash block of the page builds itself (``dataprep shard SRC OUT``) is left out.
- A page that mentions ``s3://`` gets a local S3 server (moto on 127.0.0.1): ``AWS_ENDPOINT_URL`` and keys
  in the environment, and the bucket ``demo-bucket``, empty when the page starts.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataprep import cli
from dataprep.synthetic import SyntheticSpec, make_dataset
from tests.docs.blocks import Block, blocks, built_outputs

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PREPARED = ("shards", "lm-tokens")
BUCKET = "demo-bucket"
BLOCK_TIMEOUT_S = 300  # a guard against a hang, never a bound on speed


def _shard(*args: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(["shard", *args, "--no-progress"])
    assert status == 0, f"dataprep shard {' '.join(args)}: exit {status}"


@pytest.fixture(scope="session")
def docs_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-ins for the reader's data (module docstring), made once; read-only."""
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]  # Python 3.14 and later
    except ImportError:
        from backports import zstd  # type: ignore[no-redef,unused-ignore]

    made = tmp_path_factory.mktemp("docs-made")
    make_dataset(made, SyntheticSpec(images=40, classes=4, text=False, documents=200))
    data = tmp_path_factory.mktemp("docs-data")
    shutil.copytree(made / "images", data / "raw")
    shutil.copytree(made / "tables", data / "tables")
    shutil.copy(made / "corpus" / "tokenizer.json", data / "tokenizer.json")
    jsonl = (made / "corpus" / "table" / "documents.jsonl").read_bytes()
    (data / "corpus.jsonl.zst").write_bytes(zstd.compress(jsonl))
    _shard(str(data / "raw"), str(data / "shards"), "--resize-short", "64")
    _shard(str(data / "corpus.jsonl.zst"), str(data / "lm-tokens"), "--tokenizer", str(data / "tokenizer.json"))
    return data


@pytest.fixture(scope="module")  # its process or threads end with this module: later tests count children
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 for the pages about object storage."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


S3_ENV = {"AWS_ACCESS_KEY_ID": "docs-test", "AWS_SECRET_ACCESS_KEY": "docs-test-secret",
          "AWS_DEFAULT_REGION": "us-east-1"}


def _empty_bucket(endpoint: str) -> None:
    import boto3

    s3 = boto3.resource("s3", endpoint_url=endpoint, region_name=S3_ENV["AWS_DEFAULT_REGION"],
                        aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"])
    bucket = s3.Bucket(BUCKET)
    if bucket.creation_date is None:
        bucket.create()
    bucket.objects.all().delete()


def _page_dir(data: Path, work: Path, page_blocks: list[Block]) -> Path:
    """A fresh copy of ``data`` (hard links) without the prepared outputs the page builds itself."""
    skip = built_outputs(page_blocks) & set(PREPARED)
    shutil.copytree(data, work, copy_function=os.link, ignore=lambda d, names: skip if Path(d) == data else ())
    (work / "examples").symlink_to(ROOT / "examples")
    return work


def _environment(s3: str | None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env["SHARDFEED_REPO"] = str(ROOT)
    env["SHARDFEED_DOCS_TEST"] = "1"
    if s3 is not None:
        env.update(S3_ENV, AWS_ENDPOINT_URL=s3)
    return env


class PythonRunner:
    """The client of tests/docs/runner.py's server: one request per block, answered by its exit status."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.server = subprocess.Popen([sys.executable, "-m", "tests.docs.runner"], cwd=ROOT, env=env, text=True,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def _answer(self, key: str, timeout_s: float) -> int:
        assert self.server.stdout is not None
        ready, _, _ = select.select([self.server.stdout], [], [], timeout_s)
        line = self.server.stdout.readline() if ready else ""
        if not line:
            raise TimeoutError(f"no {key!r} from the block runner in {timeout_s:g} s (exit {self.server.poll()})")
        return int(json.loads(line)[key])

    def run(self, script: Path, cwd: Path, env: dict[str, str], out: Path, err: Path) -> int:
        """The script's exit status; a script that runs past BLOCK_TIMEOUT_S is killed (status -9)."""
        assert self.server.stdin is not None
        request = {"script": str(script), "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        pid = self._answer("pid", 60)
        try:
            return self._answer("status", BLOCK_TIMEOUT_S)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            return self._answer("status", 60)

    def close(self) -> None:
        assert self.server.stdin is not None
        self.server.stdin.close()
        self.server.wait(timeout=60)


@pytest.fixture(scope="module")  # its process or threads end with this module: later tests count children
def python_runner() -> Iterator[PythonRunner]:
    runner = PythonRunner()
    try:
        yield runner
    finally:
        runner.close()


def _run(block: Block, cwd: Path, env: dict[str, str], number: int, python: PythonRunner | None = None) -> None:
    """Run one block in ``cwd``; a non-zero exit fails the test with the block, its output and where it is."""
    stem = cwd.parent / f"{cwd.name}-block-{number:02d}"
    script = stem.with_suffix(".py" if block.runner == "python" else ".sh")
    script.write_text(block.code, encoding="utf-8")
    out, err = stem.with_suffix(".out"), stem.with_suffix(".err")
    if block.runner == "python" and python is not None:
        status = python.run(script, cwd, env, out, err)
    else:
        command = ([sys.executable, str(script)] if block.runner == "python"
                   else ["bash", "-euo", "pipefail", str(script)])
        with out.open("w") as stdout, err.open("w") as stderr:
            status = subprocess.run(command, cwd=cwd, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                    timeout=BLOCK_TIMEOUT_S).returncode
    if status != 0:
        pytest.fail(f"{block.where()} exited {status}\n--- code\n{block.code}--- stdout\n"
                    f"{out.read_text()[-4000:]}\n--- stderr\n{err.read_text()[-4000:]}", pytrace=False)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_code_blocks_run(page: Path, docs_data: Path, tmp_path: Path, request: pytest.FixtureRequest,
                              python_runner: PythonRunner) -> None:
    page_blocks = blocks(page)
    runnable = [b for b in page_blocks if b.runner is not None]
    if not runnable:
        pytest.skip(f"{page.name}: no python or bash block")
    s3 = None
    if any("s3://" in b.code for b in runnable):
        s3 = request.getfixturevalue("s3_endpoint")
        _empty_bucket(s3)
    cwd = _page_dir(docs_data, tmp_path / "page", page_blocks)
    env = _environment(s3)
    for number, block in enumerate(runnable):
        _run(block, cwd, env, number, python_runner)


def test_blocks_are_found_with_their_language_and_skip_reason(tmp_path: Path) -> None:
    text = ("intro\n```python\nprint(1)\n```\n<!-- not run: needs CUDA -->\n```bash\nnvidia-smi\n```\n"
            "```text\noutput\n```\n  ```sh\n  dataprep shard raw/ shards/ --resize-short 64\n  ```\n```\nplain\n```\n")
    found = blocks(tmp_path / "page.md", text)
    assert [(b.line, b.language, b.runner, b.not_run) for b in found] == [
        (2, "python", "python", None), (6, "bash", None, "needs CUDA"), (9, "text", None, None),
        (12, "sh", "bash", None), (15, "", None, None)]
    assert found[3].code == "dataprep shard raw/ shards/ --resize-short 64\n"
    assert built_outputs(found) == {"shards"}


def test_a_failing_block_fails_its_page(tmp_path: Path, python_runner: PythonRunner) -> None:
    (tmp_path / "page").mkdir()
    bash = Block(tmp_path / "page.md", 3, "bash", "echo before\nfalse\necho after\n", None)
    with pytest.raises(pytest.fail.Exception, match=r"page.md:3 \(bash\) exited 1(?s:.*)before"):
        _run(bash, tmp_path / "page", _environment(None), 0)
    python = Block(tmp_path / "page.md", 7, "python", "import os, sys\nprint(os.getcwd())\nsys.exit(3)\n", None)
    with pytest.raises(pytest.fail.Exception, match=r"page.md:7 \(python\) exited 3(?s:.*)page"):
        _run(python, tmp_path / "page", _environment(None), 1, python_runner)
    raises = Block(tmp_path / "page.md", 9, "python", "raise KeyError('no such field')\n", None)
    with pytest.raises(pytest.fail.Exception, match=r"exited 1(?s:.*)KeyError: 'no such field'"):
        _run(raises, tmp_path / "page", _environment(None), 2, python_runner)


def test_python_blocks_run_as_a_script_would(tmp_path: Path, python_runner: PythonRunner) -> None:
    """__name__, argv, cwd, the environment, sys.path[0], atexit and non-daemon threads: as ``python block.py``."""
    (tmp_path / "page").mkdir()
    code = ("import atexit, json, os, sys, threading, time\n"
            "atexit.register(lambda: open('atexit.txt', 'w').write('ran'))\n"
            "threading.Thread(target=lambda: (time.sleep(0.2), open('thread.txt', 'w').write('joined'))).start()\n"
            "json.dump({'name': __name__, 'argv0': os.path.basename(sys.argv[0]), 'cwd': os.getcwd(),\n"
            "           'env': os.environ.get('SHARDFEED_DOCS_TEST'), 'path0': sys.path[0]}, open('seen.json', 'w'))\n")
    _run(Block(tmp_path / "page.md", 1, "python", code, None), tmp_path / "page", _environment(None), 0, python_runner)
    seen = json.loads((tmp_path / "page" / "seen.json").read_text())
    assert seen == {"name": "__main__", "argv0": "page-block-00.py", "cwd": str(tmp_path / "page"), "env": "1",
                    "path0": str(tmp_path)}
    assert (tmp_path / "page" / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "page" / "thread.txt").read_text() == "joined"


def test_every_page_is_collected() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/dataprep.md", "docs/loader.md", "docs/tokens.md", "docs/object-storage.md",
            "docs/benchmarks.md"} <= names
    assert not any(name.startswith("docs/api/") for name in names), "the API pages hold directives only"
