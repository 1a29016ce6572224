"""What a file's name says: its extension and which kind of input that is, hidden and documentation files,
the stems that group files into samples, and names fit for messages."""

from __future__ import annotations

import os


IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "gif"})


# dataprep.inputs.tables reads each; "json" is JSON lines (the C4 / Dolma convention; one JSON array is refused)
TABLE_EXTENSIONS = frozenset({"csv", "tsv", "jsonl", "ndjson", "json", "parquet"})


TEXT_EXTENSIONS = frozenset({"txt", "text", "md"})


# The last extension of a compressed file -> its codec (``dataprep.inputs.compressed`` reads each as a stream):
# ``part-0.jsonl.gz`` is a JSON-lines table compressed with gzip.
COMPRESSION_EXTENSIONS: dict[str, str] = {"gz": "gzip", "zst": "zstd", "bz2": "bzip2", "xz": "xz"}


# Names (up to the first dot, lower case) of files that document a dataset rather than hold
# it, or that file managers leave behind (Thumbs.db, desktop.ini): never data in detection.
DOC_STEMS = frozenset({"readme", "license", "licence", "copying", "notice", "changelog", "authors", "citation",
                       "contributing", "thumbs", "desktop"})


def extension(name: str) -> str:
    """Lower-case extension after the last dot of a file name ('' when none; a leading dot starts no extension)."""
    base = name.rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[1].lower() if "." in base.lstrip(".") else ""


def codec_of(name: str) -> str | None:
    """The codec of a compressed file's name ('gzip', 'zstd', 'bzip2', 'xz': ``COMPRESSION_EXTENSIONS``), else None."""
    return COMPRESSION_EXTENSIONS.get(extension(name))


def without_codec(name: str) -> str:
    """The name without its compression extension: 'a/part-0.jsonl.gz' -> 'a/part-0.jsonl'; others unchanged."""
    return name.rpartition(".")[0] if codec_of(name) is not None else name


def data_extension(name: str) -> str:
    """The extension of what a file holds, its compression aside: 'part-0.jsonl.GZ' -> 'jsonl', 'a.txt' -> 'txt'."""
    return extension(without_codec(name))


def is_hidden(name: str) -> bool:
    """Whether a file name (last path component) starts with a dot: ``.DS_Store``, ``._a.jpg``."""
    return name.rsplit("/", 1)[-1].startswith(".")


def last_dot_stem(name: str) -> str:
    """The name up to its last dot (image-folder samples): 'a.b c.jpg' -> 'a.b c'; 'a' -> 'a'."""
    return name.rpartition(".")[0] if "." in name.lstrip(".") else name


def first_dot_stem(name: str) -> str:
    """The name up to its first dot (grouped samples, WebDataset's key): 'a.seg.png' -> 'a'."""
    return name.partition(".")[0]


def field_problem(field_name: str) -> str | None:
    """Why a sidecar's field name (its extension, lower case) cannot name a field of a sample, else None."""
    if not field_name:
        return "it has no extension, so it names no field of a sample (<stem>.<field>)"
    if field_name.startswith("_"):
        return f"field {field_name!r} starts with '_', which WebDataset keeps for __key__ and __url__"
    try:
        field_name.encode("utf-8")
    except UnicodeEncodeError:
        return f"its extension {field_name.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8"
    return None


def printable(rel: str) -> str:
    """A path as text that encodes to UTF-8: undecodable bytes shown as \\xNN (for messages, the plan, the manifest)."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")
