"""The fenced code blocks of a Markdown page, as tests/docs/test_code_blocks.py runs them (see its docstring)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RUN_LANGUAGES = {"python": "python", "bash": "bash", "sh": "bash"}
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
# `dataprep shard SRC OUT` or `dataprep index OUT` in a bash block: OUT is built by the page itself.
BUILDS = re.compile(r"\bdataprep\s+(?:shard\s+\S+|index)\s+(?P<out>[^\s;|&]+)")


@dataclass(frozen=True)
class Block:
    """One fenced block: ``language`` as written (lower case), ``line`` its fence's line (1-based)."""

    page: Path
    line: int
    language: str
    code: str
    not_run: str | None  # the reason of a `<!-- not run: REASON -->` right before the fence

    @property
    def runner(self) -> str | None:
        """"python" or "bash" when the block is run, else None (output, config, skipped)."""
        return None if self.not_run is not None else RUN_LANGUAGES.get(self.language)

    def where(self) -> str:
        return f"{self.page.name}:{self.line} ({self.language})"


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """Every fenced block of ``page`` in document order (``text``: its content, read from disk if None)."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence, language = match["fence"], (match["info"].split() or [""])[0].lower()
        indent = len(match["indent"])
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        code = "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines[i + 1:end])
        marker = NOT_RUN.match(lines[i - 1]) if i > 0 else None
        found.append(Block(page, i + 1, language, code + "\n", marker["reason"] if marker else None))
        i = end + 1
    return found


def built_outputs(page_blocks: list[Block]) -> set[str]:
    """Names of the outputs the page's run bash blocks build themselves (`dataprep shard SRC OUT`)."""
    names: set[str] = set()
    for block in page_blocks:
        if block.runner == "bash":
            names.update(m["out"].rstrip("/") for m in BUILDS.finditer(block.code))
    return names
