"""tools.review's references rule: backticked names and paths in docstrings and Markdown must name code
that exists (modules, their names, class members, files), checked on small trees built to trip it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.review.trees import write_tree
from tools.review.__main__ import main
from tools.review.measure import review

MODULE = '''\
    """The reader. ``loaders.read.reader.Reader.read`` and ``loaders.read.reader.Reader.gone``.

    ``loaders.read.reader.Reader.size``, ``loaders.read.reader.LIMIT``, ``loaders.read.missing``,
    ``loaders.Reader.read``, ``loaders.Reader.nothing``, ``loaders.read.reader.Child.read``,
    ``loaders.read.reader.External.anything``, ``loaders.read.reader.render(x, y=1)``.
    """
    from torch.utils.data import Dataset

    LIMIT, (OTHER, *REST) = 1, (2, 3)


    class Reader:
        """``loaders/read/reader.py:12`` and ``loaders/read/gone.py``; ``torch.nn.Module`` is not ours."""

        def __init__(self) -> None:
            self.size = 1

        def read(self) -> int:
            return self.size


    class Child(Reader):
        """``loaders.read.reader.Frozen.limit`` and ``loaders.read.reader.Frozen.unset``."""


    class External(Dataset):
        pass


    def render(x: int, y: int = 0) -> str:
        return str(x + y)


    class Frozen:
        def __post_init__(self) -> None:
            object.__setattr__(self, "limit", 1)
    '''


def _stale(root: Path) -> list[tuple[str, str]]:
    return [(f.where(), f.name) for f in review(root).findings["stale_references"]]


def test_a_docstring_naming_a_module_name_or_member_that_does_not_exist_fails_the_review(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, {
        "loaders/__init__.py": '"""``loaders.read``."""\nfrom loaders.read.reader import Reader\n',
        "loaders/read/__init__.py": "",
        "loaders/read/reader.py": MODULE,
    })
    assert _stale(tmp_path) == [
        ("loaders/read/reader.py:1", "loaders.read.reader.Reader.gone"),
        ("loaders/read/reader.py:3", "loaders.read.missing"),
        ("loaders/read/reader.py:4", "loaders.Reader.nothing"),
        ("loaders/read/reader.py:13", "loaders/read/gone.py"),
        ("loaders/read/reader.py:23", "loaders.read.reader.Frozen.unset"),
    ]
    assert main(["--root", str(tmp_path)]) == 1
    assert "FAILED: references that do not resolve" in capsys.readouterr().out


def test_markdown_paths_module_tables_and_commands_are_checked_outside_fences_and_history(tmp_path: Path) -> None:
    fence = "```"
    write_tree(tmp_path, {
        "dataprep/__init__.py": "",
        "dataprep/output/__init__.py": "",
        "dataprep/output/store.py": "X = 1\n",
        "dataprep/output/README.md": "| `store.py` | here |\n| `stage.py` | moved away |\n`test_store.py`\n",
        "tests/dataprep/output/test_store.py": "",
        "README.md": (f"`dataprep/output/` `output/store.py` `output/gone.py` `python -m dataprep.output.store`\n"
                      f"`python -m dataprep.cli --help` torch's `test/test_dataloader.py` `demo/raw`\n"
                      f"{fence}python\nimport dataprep.gone  # `dataprep.gone`\n{fence}\n`dataprep.output.store.X`\n"),
        "tools/RESULTS.md": "`dataprep.writers` existed when this was written\n",
        "docs/guide.md": "`dataprep.output.store.Y`\n",
        ".venv/lib/README.md": "`dataprep.nothing`\n",
    })
    assert _stale(tmp_path) == [
        ("README.md:1", "output/gone.py"),
        ("README.md:2", "python -m dataprep.cli --help"),
        ("dataprep/output/README.md:2", "stage.py"),
        ("docs/guide.md:1", "dataprep.output.store.Y"),
    ]


def test_a_package_module_map_must_name_its_modules(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "loaders/__init__.py": "",
        "loaders/cache/__init__.py": ('"""The cache.\n\nModules:\n    cache   the cache, which\n'
                                      '            wraps here\n    errors  gone\n\nerrors are elsewhere.\n"""\n'),
        "loaders/cache/cache.py": "",
    })
    assert _stale(tmp_path) == [("loaders/cache/__init__.py:6", "module map: errors")]


@pytest.mark.parametrize("definition", ["EXIT_OK, EXIT_FAILURE = 0, 1", "EXIT_FAILURE: int = 1",
                                        "EXIT_FAILURE = EXIT_OTHER = 1", "(A, [EXIT_FAILURE]) = 0, [1]",
                                        "EXIT_FAILURE = 0\nEXIT_FAILURE += 1",
                                        "try:\n    import x\nexcept ImportError:\n    EXIT_FAILURE = 1"])
def test_a_constant_defined_twice_in_any_assignment_form_fails_the_review(tmp_path: Path, definition: str) -> None:
    write_tree(tmp_path, {
        "dataprep/cli/main.py": "EXIT_FAILURE, EXIT_USAGE = 1, 2\n",
        "dataprep/cli/read.py": definition + "\n",
        "loaders/state.py": "from dataprep.cli.main import EXIT_FAILURE\nEXIT_FAILURE_HINT = 'imports do not count'\n",
    })
    result = review(tmp_path)
    assert [(f.where(), f.name, f.count) for f in result.findings["duplicate_names"]] == [
        ("dataprep/cli/main.py:1", "EXIT_FAILURE", 2)]
    assert result.failed


def test_a_folder_of_more_than_five_modules_needs_a_readme_saying_its_job(tmp_path: Path) -> None:
    six = {f"{i}.py": "" for i in "abcdef"}
    write_tree(tmp_path, {
        **{f"loaders/none/{name}": text for name, text in six.items()},
        **{f"loaders/vague/{name}": text for name, text in six.items()}, "loaders/vague/README.md": "# vague\n",
        **{f"loaders/good/{name}": text for name, text in six.items()},
        "loaders/good/README.md": "# loaders/good — one job, said in one line\n",
        **{f"loaders/five/{name}": "" for name in ("a.py", "b.py", "c.py", "d.py", "e.py", "__init__.py")},
    })
    found = review(tmp_path).findings["readme_gaps"]
    assert [(f.name, f.count) for f in found] == [("loaders/none", 6), ("loaders/vague", 6)]
    assert not review(tmp_path).failed
