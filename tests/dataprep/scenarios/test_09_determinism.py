"""9. Determinism: the same RAW twice, other ``--workers``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dataprep.helpers import (assert_same_output, grouped_tree, image_file, image_tree, read_output, run_in,
                                    write_text)


def test_same_raw_twice_is_byte_identical(cli, tmp_path: Path) -> None:
    """Two runs of one command (same relative paths, so the same command line): every byte equal."""
    raw = tmp_path / "raw"
    image_tree(raw, {"cat": 4, "dog": 4, "eel": 3}, broken=2)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        args = ("shard", "../raw", "out", "--workers", "2", "--samples-per-shard", "3")
        assert run_in(cli, args, tmp_path / name).rc == 0
    assert_same_output(tmp_path / "a" / "out", tmp_path / "b" / "out")


@pytest.mark.parametrize("kind", ["images", "images-parquet", "grouped", "table", "text-lines", "text-files"])
def test_workers_do_not_change_output(cli, tmp_path: Path, kind: str) -> None:
    raw = tmp_path / "raw"
    extra: tuple[str, ...] = ("--samples-per-shard", "3")
    if kind.startswith("images"):
        image_tree(raw, {"cat": 4, "dog": 4}, broken=2)
        image_file(raw / "dog" / "copy.jpg", size=(48, 40), color=(0, 0, 90))   # a duplicate of cat/000.jpg
        extra += ("--format", "parquet") if kind == "images-parquet" else ()
    elif kind == "grouped":
        grouped_tree(raw, n=10)
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
