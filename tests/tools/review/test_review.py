"""tools.review: each measurement on a small tree built to trip it, the exit status on an import
cycle, the JSON report, and this checkout itself (no hard rule broken, no tools module importing a
program). The references rule has its own tests (``test_references.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tools.review.trees import write_tree
from tools.review.__main__ import main
from tools.review.imports import cycles
from tools.review.measure import HARD_RULES, review

ROOT = Path(__file__).resolve().parents[3]


def _names(root: Path, key: str) -> list[str]:
    return [f.name for f in review(root).findings[key]]


def test_a_cycle_held_by_a_type_checking_import_fails_the_review(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, {
        "loaders/a.py": "from loaders.b import B\n",
        "loaders/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loaders.a import A\nB = 1\n",
    })
    assert _names(tmp_path, "cycles") == ["loaders.a <-> loaders.b"]
    assert main(["--root", str(tmp_path)]) == 1
    assert "FAILED: import cycles" in capsys.readouterr().out


def test_an_import_inside_a_function_and_a_package_init_count(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "dataprep/run.py": "def go():\n    from dataprep import ranges\n",
        "dataprep/ranges.py": "from dataprep.run import go\n",
        "loaders/x.py": "from loaders import VERSION\n",
        "loaders/y.py": "from loaders import x\n",
    })
    (tmp_path / "loaders/__init__.py").write_text("VERSION = 1\nfrom loaders.x import VERSION as _\n")
    groups = _names(tmp_path, "cycles")
    assert groups == ["dataprep.ranges <-> dataprep.run", "loaders <-> loaders.x"]


def test_no_cycle_exits_0_and_the_json_has_every_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, {"loaders/a.py": "import loaders.b\n", "loaders/b.py": "import os\n"})
    assert main(["--root", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tool"] == "review" and doc["results"]["failed"] is False
    assert doc["results"]["counts"]["cycles"] == {"dataprep": 0, "loaders": 0, "tools": 0, "total": 0}


def test_cycles_finds_every_strongly_connected_group() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d", "e"}, "e": {"d"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]


def test_sizes_records_and_private_reads(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(40))
    write_tree(tmp_path, {
        "dataprep/big.py": "X = 1\n" * 401,
        "dataprep/long.py": f"def long():\n{body}\n\ndef short():\n    return 1\n",
        "loaders/wide.py": "class W:\n    def __init__(self, a, b, c, d, e, f, g, h, i):\n        self._kept = a\n",
        "loaders/rec.py": ("class Rec:\n    pass\n\nRec(1, 2, 3, 4, 5, 6)\nRec(1, 2, 3, 4, 5)\n"
                           "Rec(a=1, b=2, c=3, d=4, e=5, f=6)\n"),
        "loaders/reader.py": "from loaders.wide import W\nw = W(*range(9))\nprint(w._kept)\nw._kept = 2\n",
    })
    result = review(tmp_path)
    assert [(f.name, f.count) for f in result.findings["long_modules"]] == [("dataprep.big", 401)]
    assert [(f.name, f.count) for f in result.findings["long_functions"]] == [("long", 41)]
    assert [(f.name, f.count) for f in result.findings["wide_constructors"]] == [("__init__", 9)]
    assert [(f.where(), f.count) for f in result.findings["positional_records"]] == [("loaders/rec.py:4", 6)]
    assert [f.where() for f in result.findings["private_reads"]] == ["loaders/reader.py:3", "loaders/reader.py:4"]


def test_duplicates_prints_lines_and_type_ignores(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "tests/test_a.py": "def shard_cli():\n    pass\n\ndef test_x():\n    pass\n",
        "tests/test_b.py": "def shard_cli():\n    pass\n\ndef test_x():\n    pass\n",
        "tools/p.py": "def main():\n    print('a program')\n",
        "tools/q.py": "def main():\n    pass\n",
        "loaders/lib.py": ("def f():\n    print('library')\n"
                           f"X = '{'y' * 120}'\n"
                           "a = 1  # type: ignore\n"
                           "b = 2  # type: ignore[misc]\n"
                           "c = 3  # type: ignore[misc]  # the stubs are wrong here\n"
                           "d = 'a string, not a comment: # type: ignore'\n"),
        "pyproject.toml": '[tool.ruff.lint.per-file-ignores]\n"tools/**" = ["T20"]\n',
    })
    result = review(tmp_path)
    assert [(f.name, f.count) for f in result.findings["duplicate_helpers"]] == [("shard_cli", 2)]
    assert [f.where() for f in result.findings["library_prints"]] == ["loaders/lib.py:2"]
    assert [f.where() for f in result.findings["long_lines"]] == ["loaders/lib.py:3"]
    assert len(result.findings["type_ignores"]) == 3
    assert [f.where() for f in result.findings["bare_type_ignores"]] == ["loaders/lib.py:4", "loaders/lib.py:5"]


def test_a_module_importing_a_program_is_reported(tmp_path: Path) -> None:
    main_block = "import sys\nif __name__ == '__main__':\n    sys.exit(0)\n"
    write_tree(tmp_path, {
        "tools/bench/one.py": "from tools.profile.two import helper\n" + main_block,
        "tools/profile/two.py": "def helper():\n    pass\n" + main_block,
        "tools/common/lib.py": "def shared():\n    pass\n",
        "tools/common/runner.py": "def run():\n    from tools.profile import two\n",
        "tools/profile/three.py": "from tools.common.lib import shared\n" + main_block,
        "tools/review/__main__.py": "from tools.common.lib import shared\n",
        "dataprep/cli.py": main_block,
        "tools/bench/four.py": "import dataprep.cli\n" + main_block,
    })
    assert _names(tmp_path, "program_imports") == ["tools.bench.one -> tools.profile.two",
                                                   "tools.common.runner -> tools.profile.two"]


def test_a_bad_root_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_this_checkout_breaks_no_hard_rule_and_no_tools_module_imports_a_program() -> None:
    result = review(ROOT)
    broken = {key: [f"{f.where()} {f.name}" for f in result.findings[key]] for key in HARD_RULES}
    assert broken == {key: [] for key in HARD_RULES}
    assert result.findings["program_imports"] == []


def test_an_import_against_the_layer_order_fails_the_review(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """dataprep's formats sit below its engines: formats importing an engine is refused, the other way is fine."""
    write_tree(tmp_path, {
        "dataprep/formats/manifest.py": "from dataprep.engines.loop import run\n",
        "dataprep/engines/loop.py": "from dataprep.errors import E\nrun = 1\n",
        "dataprep/errors.py": "E = 1\n",
        "dataprep/extra/thing.py": "X = 1\n",
    })
    assert _names(tmp_path, "layer_violations") == ["dataprep.formats.manifest -> dataprep.engines.loop"]
    assert _names(tmp_path, "unplaced_stages") == ["dataprep.extra"]
    assert main(["--root", str(tmp_path)]) == 1
    assert "FAILED: imports against the layers" in capsys.readouterr().out


def test_loaders_may_read_dataprep_only_through_formats_and_remote(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "loaders/read/shards.py": "from dataprep.formats.manifest import M\nfrom dataprep.plan.seen import S\n",
        "loaders/cache/cache.py": "from dataprep.remote import R\n",
        "dataprep/formats/manifest.py": "M = 1\n",
        "dataprep/plan/seen.py": "S = 1\n",
        "dataprep/remote/__init__.py": "R = 1\n",
    })
    assert _names(tmp_path, "foreign_reads") == ["loaders.read.shards -> dataprep.plan.seen"]
    assert review(tmp_path).failed


def test_a_public_name_defined_in_two_product_modules_fails_the_review(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "dataprep/inputs/a.py": "class Layout:\n    pass\nLIMIT = 1\nT = TypeVar('T')\n_private = 1\n",
        "loaders/cache/b.py": "def Layout():\n    pass\nLIMIT = 2\nT = TypeVar('T')\n_private = 2\n",
    })
    found = review(tmp_path).findings["duplicate_names"]
    assert sorted((f.name, f.count) for f in found) == [("LIMIT", 2), ("Layout", 2)]
    assert review(tmp_path).failed
