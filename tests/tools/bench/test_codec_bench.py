"""tools.bench.codec_bench: every codec and library reads the same corpus, through dataprep's readers too."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench import codec_bench


def test_every_row_reads_the_whole_corpus_and_the_report_says_so(tmp_path: Path, capsys) -> None:
    files = codec_bench.make_corpus(tmp_path, 0.2, seed=0)
    assert set(files) == {"plain", "gzip", "zstd", "bzip2", "xz"}
    rows = codec_bench.measure_codecs(files, repeat=1)
    kinds = {(r.kind, r.codec) for r in rows}
    assert {("decode", c) for c in ("gzip", "zstd", "bzip2", "xz")} <= kinds
    assert {(k, c) for k in ("lines", "rows") for c in files} <= kinds
    assert all(r.seconds > 0 and r.mib_s > 0 and r.compressed_mib <= r.mib for r in rows)
    assert codec_bench.main(["--mb", "0.2", "--repeat", "1", "--keep", str(tmp_path), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tool"] == "codec_bench" and len(report["results"]["rows"]) == len(rows)
