"""6. Tables and text: bad rows, duplicates, file parts, ranges, mixed RAWs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.dataprep.helpers import (KILL_POINTS, MANIFEST, assert_accounted, assert_same_output, identities,
                                    image_file, image_tree, kill_when, read_output, run_in, table_tree, text_tree,
                                    write_text)


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
    img = image_file(tmp_path / "photo.jpg")
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
        table_tree(raw, rows=1500)
        extra: tuple[str, ...] = ("--dedup-on", "url", "--required", "id")
    else:
        text_tree(raw, lines=1500)
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
    text_tree(raw)
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
    image_file(raw / "cat" / "a.jpg", color=(1, 2, 3))
    image_file(raw / "dog" / "b.jpg", color=(1, 2, 9))
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
