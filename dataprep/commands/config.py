"""``ShardConfig``: every option of ``dataprep shard``, validated once."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataprep.clean.options import ImageOptions, TableOptions, TextOptions
from dataprep.cpus import cpus_available
from dataprep.errors import UsageError
from dataprep.formats.manifest import OutputFormat
from dataprep.formats.parquet.writer import DEFAULT_ROW_GROUP_BYTES
from dataprep.formats.writer import DEFAULT_MAX_SHARD_BYTES
from dataprep.inputs.lines import DEFAULT_MAX_RECORD_BYTES
from dataprep.inputs.sources import Layout
from dataprep.output.staging import run_staging
from dataprep.tokenize.tokenizer import BYTES_SPEC, Tokenizer
from dataprep.errors import as_enum, require_int, bad_argument

# How long a store request may make no progress, its retries included, before the run fails naming the URL.
DEFAULT_REMOTE_TIMEOUT_S = 60.0


# A table's column tokenized when --text-column is not given, and the shortest document kept by default.
DEFAULT_TEXT_COLUMN = "text"
DEFAULT_MIN_TOKENS = 1


class Engine(enum.StrEnum):
    """Where the ranges of a plan are written: this machine (one after another), or Ray tasks."""

    LOCAL = "local"
    RAY = "ray"


@dataclass(frozen=True)
class TokenOptions:
    """Token output (``--tokenizer``): what turns text into ids, and which documents are kept.

    tokenizer: a Hugging Face ``tokenizer.json`` path or ``"bytes"`` (``dataprep.tokenize.tokenizer``);
    None: no token output, and the other options must be left unset. eos: the token string
    appended to every document (None: the tokenizer's own). min_tokens: a document with
    fewer tokens, its EOS not counted, is a ``too_few_tokens`` reject (None: 1). text_column:
    the column of a table that holds the text (None: ``"text"``); the other columns are dropped.
    """

    tokenizer: str | None = None
    eos: str | None = None
    min_tokens: int | None = None
    text_column: str | None = None

    def __post_init__(self) -> None:
        for name in ("tokenizer", "eos", "text_column"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise UsageError(f"--{name.replace('_', '-')} must be a non-empty string (got {value!r})")
        require_int("min_tokens", self.min_tokens, minimum=0, optional=True, error=UsageError)
        if self.tokenizer is None:
            given = [flag for flag, value in (("--eos", self.eos), ("--min-tokens", self.min_tokens),
                                              ("--text-column", self.text_column)) if value is not None]
            if given:
                verb, them = ("apply", "them") if len(given) > 1 else ("applies", "it")
                raise UsageError(f"{', '.join(given)} {verb} to token output; add --tokenizer TOK (a tokenizer.json "
                                 f"or {BYTES_SPEC}), or leave {them} out")

    @property
    def column(self) -> str:
        """The table column that is tokenized."""
        return self.text_column or DEFAULT_TEXT_COLUMN

    @property
    def fewest_tokens(self) -> int:
        """The fewest tokens (EOS not counted) a kept document has."""
        return DEFAULT_MIN_TOKENS if self.min_tokens is None else self.min_tokens

    def fingerprint(self, tokenizer: Tokenizer) -> dict[str, Any]:
        """The options that shape token shards: the tokenizer file (resolved path, sha256 of its bytes), EOS, ..."""
        spec = self.tokenizer or BYTES_SPEC
        path = spec if spec == BYTES_SPEC else os.fsdecode(Path(spec).resolve())
        return {"tokenizer": {"path": path, "sha256": tokenizer.sha256}, "eos": tokenizer.eos,
                "min_tokens": self.fewest_tokens, "text_column": self.column}


@dataclass(frozen=True)
class ShardConfig:
    """Options of one ``dataprep shard RAW OUT`` run.

    Options that shape the output bytes are in ``fingerprint()``; the rest (workers,
    progress, budgets, ``allow_empty``: a run that keeps no sample succeeds) may change
    between a run and its resumption. ``range_bytes``: input bytes per range of the plan (None:
``auto``, a size from the plan's bytes: ``dataprep.plan.range_size``).
    ``engine``, ``address``: where ranges run (``dataprep.commands.shard.make_engine``); ``address`` is Ray's
    (None: ``RAY_ADDRESS`` or a new local cluster). Neither changes the output bytes.
    ``tokens``: token output (``TokenOptions``); with a tokenizer the format is ``tokens``.
    ``max_record_bytes``: the longest line, row or text file read (bytes, after decompression); a longer
    one is a ``record_too_long`` reject, skipped without being held whole.

    Object storage (issue 22): ``out`` or ``raw`` given as a store URL (``s3://``, ``gs://``,
    ``az://``) is kept in ``out_url`` / ``raw_url``, and ``out`` / ``raw`` become this machine's
    folders for it under the run's staging folder (``dataprep.output.staging``: ``staging``, default
    the system's temporary folder): OUT's staged files, RAW's mirror. ``file://`` URLs are local
    paths. ``remote_timeout_s``: a store request without progress this long, retries included,
    fails the run naming the URL. ``out_name`` / ``raw_name``: OUT and RAW as the user named them.
    """

    raw: Path
    out: Path
    layout: Layout | None = None  # None = detect
    output_format: OutputFormat = OutputFormat.AUTO
    max_shard_bytes: int | None = DEFAULT_MAX_SHARD_BYTES
    max_samples_per_shard: int | None = None
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    prefix: str = "shard"
    seed: int = 0
    shuffle: bool = True
    image: ImageOptions = field(default_factory=ImageOptions)
    table: TableOptions = field(default_factory=TableOptions)
    text: TextOptions = field(default_factory=TextOptions)
    tokens: TokenOptions = field(default_factory=TokenOptions)
    workers: int = field(default_factory=cpus_available)
    follow_symlinks: bool = False
    overwrite: bool = False
    max_reject_fraction: float | None = None
    allow_empty: bool = False
    range_bytes: int | None = None
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    engine: Engine = Engine.LOCAL
    address: str | None = None
    staging: Path | None = None
    remote_timeout_s: float = DEFAULT_REMOTE_TIMEOUT_S
    out_url: str | None = None
    raw_url: str | None = None

    def __post_init__(self) -> None:
        # Paths are coerced here, once: everything downstream takes them as Path.
        if self.staging is not None:
            object.__setattr__(self, "staging", Path(self.staging))
        self._place("out", "out_url", None)
        self._place("raw", "raw_url", self.out_url or os.fsdecode(self.out.resolve()))
        if isinstance(self.remote_timeout_s, bool) or not isinstance(self.remote_timeout_s, (int, float)) \
                or not 0 < self.remote_timeout_s <= 3600:
            raise bad_argument("remote_timeout_s", "a number of seconds in (0, 3600]", self.remote_timeout_s,
                               UsageError)
        if self.max_shard_bytes is None and self.max_samples_per_shard is None:
            raise UsageError("give --shard-size and/or --samples-per-shard")
        for name in ("max_shard_bytes", "max_samples_per_shard"):
            require_int(name, getattr(self, name), minimum=1, optional=True, expected="a positive int",
                        error=UsageError)
        for name in ("row_group_bytes", "workers", "max_record_bytes"):
            require_int(name, getattr(self, name), minimum=1, error=UsageError)
        require_int("range_bytes", self.range_bytes, minimum=1, optional=True, error=UsageError)
        if not isinstance(self.prefix, str) or not self.prefix or "/" in self.prefix or self.prefix.startswith("."):
            raise bad_argument("prefix", "a plain file-name prefix", self.prefix, UsageError)
        object.__setattr__(self, "engine", as_enum("engine", Engine, self.engine, error=UsageError))
        if self.address is not None and self.engine is not Engine.RAY:
            raise UsageError(f"--address {self.address!r} is the address of a Ray cluster; it needs --engine ray")
        if self.max_reject_fraction is not None and not 0.0 <= self.max_reject_fraction <= 1.0:
            raise UsageError(f"'max_reject_fraction' must be within [0, 1] (got {self.max_reject_fraction!r})")
        self._refuse_table_options_with_tokens()

    def _place(self, name: str, url_name: str, run_key: str | None) -> None:
        """``name`` as a local Path; a store URL kept in ``url_name`` and replaced by its staging folder."""
        value = getattr(self, name)
        if isinstance(value, str) and "://" in value and getattr(self, url_name) is None:
            from dataprep.remote.errors import RemoteConfigError  # the client only for a URL: local runs skip it
            from dataprep.remote.url import parse_url

            try:
                url = parse_url(value)
            except RemoteConfigError as err:
                raise UsageError(f"{name.upper()}: {err}") from err
            if url.is_local:
                value = url.local_path
            else:
                object.__setattr__(self, url_name, str(url))
                value = run_staging(run_key or str(url), self.staging) / name
        object.__setattr__(self, name, Path(value))

    @property
    def out_name(self) -> str:
        """OUT as the user named it: its URL, or its path."""
        return self.out_url or os.fspath(self.out)

    @property
    def raw_name(self) -> str:
        """RAW as the user named it: its URL, or its path."""
        return self.raw_url or os.fspath(self.raw)

    @property
    def is_tokenized(self) -> bool:
        """Whether the run writes token shards (``--tokenizer``)."""
        return self.tokens.tokenizer is not None

    def _refuse_table_options_with_tokens(self) -> None:
        table = self.table
        given = [flag for flag, value in (("--schema", table.schema), ("--dedup-on", table.dedup_on),
                                          ("--required", table.required or None)) if value is not None]
        if self.is_tokenized and given:
            raise UsageError(f"{', '.join(given)}: with --tokenizer a table's --text-column (default "
                             f"{DEFAULT_TEXT_COLUMN!r}) is tokenized, its other columns are dropped and duplicates "
                             "are found on the text; leave these options out")

    def fingerprint(self, tokenizer: Tokenizer | None = None) -> dict[str, Any]:
        """The options that determine the output bytes, as JSON-ready values (stored in the manifest).

        Token output adds ``"tokens"`` (``TokenOptions.fingerprint``): ``tokenizer`` is the
        loaded ``--tokenizer``, required then, so that another file at the same path is told apart.
        """
        options = self._fingerprint()
        if self.is_tokenized:
            if tokenizer is None:
                raise ValueError("the fingerprint of a run with --tokenizer needs the loaded Tokenizer (got None)")
            options["tokens"] = self.tokens.fingerprint(tokenizer)
        return options

    def _fingerprint(self) -> dict[str, Any]:
        return {
            "raw": self.raw_url or os.fsdecode(self.raw.resolve()),
            "layout": str(self.layout) if self.layout else "auto",
            "format": str(self.output_format),
            "max_shard_bytes": self.max_shard_bytes,
            "max_samples_per_shard": self.max_samples_per_shard,
            "row_group_bytes": self.row_group_bytes,
            "range_bytes": self.range_bytes,
            "max_record_bytes": self.max_record_bytes,
            "prefix": self.prefix,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "follow_symlinks": self.follow_symlinks,
            "image": _jsonable(self.image),
            "table": _jsonable(self.table),
            "text": _jsonable(self.text),
        }


def _jsonable(options: object) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in getattr(options, "__dataclass_fields__", {}):
        value = getattr(options, name)
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out
