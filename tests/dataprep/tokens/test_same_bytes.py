"""The bytes of token output depend on RAW and the options only: not on --workers (threads that tokenize, processes
that clean), nor on a rerun."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dataprep.helpers import assert_same_output, run_in
from tests.dataprep.token_samples import TokenCorpus


@pytest.mark.parametrize("layout", ["text", "lines", "csv"])
def test_workers_do_not_change_the_bytes(cli, tmp_path: Path, corpus: TokenCorpus, layout: str) -> None:
    extra = ("--text-unit", "line") if layout == "lines" else ()
    outs = []
    for workers in ("1", "2", "3"):
        folder = tmp_path / f"w{workers}"
        folder.mkdir()
        res = run_in(cli, ("shard", corpus.folder(layout), "out", "--tokenizer", corpus.tokenizer, "--shard-size",
                           "40KiB", "--workers", workers, *extra), folder)
        assert res.rc == 0, res.text
        outs.append(folder / "out")
    for out in outs[1:]:
        assert_same_output(out, outs[0], drop_manifest_keys=("command",))
