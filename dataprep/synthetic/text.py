"""The text files: UTF-8 paragraphs, a duplicate line, NFC/NFD spellings, a blank file, Latin-1 bytes."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np

from dataprep.synthetic.sink import Sink, prepare_dir
from dataprep.synthetic.spec import STREAM_TEXT
from dataprep.synthetic.vocab import WORDS

_NFC_TEXT = "Crème brûlée in Zürich, déjà vu at the café.\nŒuvres naïves, señor Ångström.\n"


def _paragraphs(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` paragraphs of one sentence per line, as a list of lines ('' between paragraphs)."""
    lines: list[str] = []
    for _ in range(count):
        for _ in range(int(rng.integers(3, 6))):
            words = [str(w) for w in rng.choice(WORDS, int(rng.integers(4, 10)))]
            lines.append(" ".join(words).capitalize() + ".")
        lines.append("")
    return lines[:-1]


def write_text(top: Path, seed: int, sink: Sink) -> int:
    """Write the text files under ``top``; returns how many."""
    prepare_dir(top)
    rng = np.random.default_rng([seed, STREAM_TEXT])
    files = {f"para_{k}.txt": ("\n".join(_paragraphs(rng, 3)) + "\n").encode() for k in range(3)}
    first_line = files["para_1.txt"].split(b"\n", 1)[0]
    files["para_1.txt"] += first_line + b"\n"  # a duplicate line
    files["accents_nfc.txt"] = unicodedata.normalize("NFC", _NFC_TEXT).encode()
    files["accents_nfd.txt"] = unicodedata.normalize("NFD", _NFC_TEXT).encode()
    files["blank.txt"] = b"  \n\t\n   \n"
    latin1 = "Caf\u00e9 cr\u00e8me in Z\u00fcrich.\n".encode("latin-1")
    files["latin1.txt"] = b"First line is fine.\n" + latin1 + b"Last line is fine.\n"
    for name, data in files.items():
        sink.write(top / name, data)
    return len(files)
