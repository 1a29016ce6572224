"""The structure review of issue 19, rerunnable by anyone: ``python -m tools.review``.

``source`` (the parsed tree), ``imports`` (the import graph, its cycles, programs that
import programs), ``layers`` (layer order, reads of dataprep, names defined twice),
``references`` (docstring and Markdown references that do not resolve), ``scans`` (sizes,
records, private reads, duplicates, prints, lines, ``type: ignore``), ``measure`` (one
review: the table and the JSON), ``__main__`` (the command).
"""
