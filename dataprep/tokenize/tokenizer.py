"""Text -> token ids: a Hugging Face ``tokenizer.json`` (library ``tokenizers``) or the built-in ``bytes``.

``load_tokenizer(spec, eos=...)`` gives a ``Tokenizer``: a frozen value that names what makes
the ids (file name, sha256 of its bytes, vocabulary size, EOS) and encodes documents.

- ``spec`` is a path to a ``tokenizer.json`` (read from disk only: nothing is fetched from a
  hub, ever), or ``"bytes"``: UTF-8 bytes as ids 0-255, EOS id 256, vocabulary 257, hashed as
  the string ``"shardfeed-bytes-v1"``.
- EOS: ``eos`` names a token of the vocabulary; without it, the tokenizer's special token
  ``<|endoftext|>``, ``</s>`` or ``<eos>`` (the first present, in that order), else a
  ``UsageError``. ``bytes`` has one EOS, ``<|endoftext|>`` = 256; ``eos`` may only name it.
- Document i becomes ``Tokenizer.from_file(path).encode(text_i).ids + [eos_id]``: the
  tokenizer's default ``encode`` (its post-processor's special tokens included, e.g. a BOS),
  then the EOS. Two settings of the file are switched off because they would change
  documents: truncation (cuts documents) and padding (makes a document's ids depend on the
  others in its batch); a warning names them. A post-processor that appends the EOS
  itself gives documents ending in two EOS; a warning says so.

Threads and forks. ``Tokenizer.encode_batch`` runs the library's Rust code with the GIL
released, one document after another on the calling thread; ``TokenEncoder`` spreads a
batch over threads that each call it. The library's own Rayon pool is not used: it is
switched off through ``TOKENIZERS_PARALLELISM=false`` when the user has not set the variable.
That is what makes forking safe: a process forked after the pool ran either tokenizes on
one thread (the library turns its threads off in the child, with a warning on stderr) or,
when the user set ``TOKENIZERS_PARALLELISM=true``, deadlocks in the child's first call.
So the pool never starts by our hand, and every process forked after ``load_tokenizer``
has ``TOKENIZERS_PARALLELISM=false`` set in its environment (``os.register_at_fork``):
process workers, the write loop's child, ``multiprocessing`` fork pools all tokenize
correctly whatever the parent did. A process that unpickles a ``Tokenizer`` (a Ray task)
sets it too.

Why threads: ``encode`` holds the GIL (threads calling it do not scale); ``encode_batch``
releases it for the Rust part, and what it keeps (turning ids into arrays) is 2-5% of a
byte-level BPE's time, which bounds N threads at roughly 20-40 cores. ``python -m
tools.bench.token_bench`` compares ``TokenEncoder`` with the single-core rate x N, with forked
processes on the same pieces and with the library's Rayon pool; on the shared 2-core
development machine, busy with other work, threads spent the least CPU per token of the
three and were the fastest, the Rayon pool the slowest.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from dataprep.cpus import cpus_available
from dataprep.errors import UsageError, require_int
from dataprep.formats.tokens.index import token_dtype

log = logging.getLogger(__name__)

__all__ = [
    "BYTES_EOS",
    "BYTES_EOS_ID",
    "BYTES_SPEC",
    "BYTES_VOCAB_SIZE",
    "EOS_CANDIDATES",
    "PARALLELISM_ENV",
    "PIECES_PER_THREAD",
    "TokenEncoder",
    "Tokenizer",
    "default_threads",
    "load_tokenizer",
    "split_balanced",
]

BYTES_SPEC = "bytes"
BYTES_EOS = "<|endoftext|>"
BYTES_EOS_ID = 256
BYTES_VOCAB_SIZE = 257
BYTES_IDENTITY = "shardfeed-bytes-v1"  # what the bytes tokenizer's sha256 is of
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>")
PARALLELISM_ENV = "TOKENIZERS_PARALLELISM"
EXTRA_HINT = "pip install 'shardfeed[tokens]'"
# TokenEncoder cuts a batch into about this many pieces per thread, balanced by characters:
# a long document then holds up one piece, not a thread's whole share.
PIECES_PER_THREAD = 4

# Manifest keys of the tokenizer block (dataprep.formats.manifest documents the block).
KEY_NAME, KEY_SHA256, KEY_VOCAB_SIZE, KEY_EOS, KEY_EOS_ID, KEY_DTYPE = (
    "name", "sha256", "vocab_size", "eos", "eos_id", "dtype")


@dataclass(frozen=True)
class Tokenizer:
    """What turns text into token ids, and its identity as recorded in the manifest.

    name: the tokenizer file's name ("tokenizer.json") or "bytes"; sha256: hex digest of
    the file's bytes (for "bytes", of ``BYTES_IDENTITY``); vocab_size: largest id + 1,
    added tokens included; eos / eos_id: the token appended to every document; path: the
    file read (None for "bytes"). Equality compares the identity (name, sha256, vocabulary,
    EOS), not the path: equal tokenizers give equal ids. Picklable (process workers and Ray
    tasks receive it whole, settings included). Use ``load_tokenizer`` to make one.
    """

    name: str
    sha256: str
    vocab_size: int
    eos: str
    eos_id: int
    path: Path | None = field(default=None, compare=False)
    backend: Any = field(default=None, repr=False, compare=False)  # tokenizers.Tokenizer, None for bytes

    @property
    def dtype(self) -> np.dtype:
        """The shard dtype of the ids: uint16 below 65,500 ids, else int32 (``token_shards.token_dtype``)."""
        return token_dtype(self.vocab_size)

    def manifest_block(self) -> dict[str, Any]:
        """The manifest's ``tokenizer`` block: name, sha256, vocab_size, eos, eos_id, dtype."""
        return {KEY_NAME: self.name, KEY_SHA256: self.sha256, KEY_VOCAB_SIZE: self.vocab_size,
                KEY_EOS: self.eos, KEY_EOS_ID: self.eos_id, KEY_DTYPE: str(self.dtype)}

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's ids then ``eos_id``: one 1-D array of ``self.dtype`` per text, in order (CPU).

        Runs on the calling thread; the Rust part releases the GIL, so threads calling it
        at once use that many cores (``TokenEncoder``). Converting the ids to arrays holds
        the GIL (about 5% of the time of a byte-level BPE).
        """
        if self.backend is None:
            return [_bytes_ids(text, self.dtype) for text in texts]
        return self.to_arrays(self.library_encode(texts))

    def library_encode(self, texts: Sequence[str]) -> list[Any]:
        """The library's ``Encoding`` of each text (the GIL-free half of ``encode_batch``; tokenizer.json only)."""
        if self.backend is None:
            raise ValueError(f"the {BYTES_SPEC!r} tokenizer has no library encodings; use encode_batch")
        encode = getattr(self.backend, "encode_batch_fast", None) or self.backend.encode_batch
        return list(encode(list(texts)))

    def to_arrays(self, encodings: Sequence[Any]) -> list[np.ndarray]:
        """Each ``Encoding``'s ids then ``eos_id`` as an array of ``self.dtype`` (the half that holds the GIL)."""
        out = []
        for encoding in encodings:
            ids = encoding.ids
            doc = np.empty(len(ids) + 1, dtype=self.dtype)
            doc[:-1] = ids
            doc[-1] = self.eos_id
            out.append(doc)
        return out

    def encode(self, text: str) -> np.ndarray:
        """One text's ids then ``eos_id`` (``encode_batch`` of one text)."""
        return self.encode_batch([text])[0]

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A process that receives a tokenizer pickled (a Ray worker) keeps the library's own
        # threads off as load_tokenizer does: its task tokenizes on the thread it was given.
        self.__dict__.update(state)
        if self.backend is not None:
            _keep_library_threads_off()


def _bytes_ids(text: str, dtype: np.dtype) -> np.ndarray:
    data = text.encode("utf-8")
    doc = np.empty(len(data) + 1, dtype=dtype)
    doc[:-1] = np.frombuffer(data, dtype=np.uint8)
    doc[-1] = BYTES_EOS_ID
    return doc


def load_tokenizer(spec: str | os.PathLike[str], *, eos: str | None = None) -> Tokenizer:
    """The tokenizer ``spec`` names: ``"bytes"`` or a path to a Hugging Face ``tokenizer.json``.

    ``eos``: the token string appended to every document (module docstring for the default).
    Raises ``UsageError`` naming the path for a missing, unreadable or malformed file, an
    EOS that is not in the vocabulary or no default EOS, and when ``tokenizers`` is not
    installed.
    """
    if not isinstance(spec, (str, os.PathLike)) or not os.fspath(spec):
        raise UsageError(f"tokenizer must be a path to a tokenizer.json or {BYTES_SPEC!r} (got {spec!r})")
    if os.fspath(spec) == BYTES_SPEC:
        return _bytes_tokenizer(eos)
    path = Path(spec)
    data = _read_file(path)
    backend = _parse(path, data)
    _switch_off_batch_dependence(path, backend)
    eos, eos_id = _choose_eos(path, backend, eos)
    vocab = backend.get_vocab(with_added_tokens=True)
    tokenizer = Tokenizer(name=path.name, sha256=hashlib.sha256(data).hexdigest(), vocab_size=max(vocab.values()) + 1,
                          eos=eos, eos_id=eos_id, path=path, backend=backend)
    _warn_if_eos_added(path, tokenizer)
    _keep_library_threads_off()
    return tokenizer


def _bytes_tokenizer(eos: str | None) -> Tokenizer:
    if eos is not None and eos != BYTES_EOS:
        raise UsageError(f"--eos {eos!r}: the {BYTES_SPEC!r} tokenizer's EOS is {BYTES_EOS!r} (id {BYTES_EOS_ID}); "
                         "leave --eos out or name that token")
    return Tokenizer(name=BYTES_SPEC, sha256=hashlib.sha256(BYTES_IDENTITY.encode()).hexdigest(),
                     vocab_size=BYTES_VOCAB_SIZE, eos=BYTES_EOS, eos_id=BYTES_EOS_ID)


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as err:
        raise UsageError(f"{path}: no such tokenizer file (give the path of a Hugging Face tokenizer.json, or "
                         f"{BYTES_SPEC!r}; names on the Hugging Face hub are never fetched: download the file "
                         "first)") from err
    except IsADirectoryError as err:
        raise UsageError(f"{path}: a directory, not a tokenizer file (give the tokenizer.json inside it)") from err
    except OSError as err:
        raise UsageError(f"{path}: cannot read the tokenizer file ({err.strerror or err})") from err


def _parse(path: Path, data: bytes) -> Any:
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError as err:
        raise UsageError(f"{path}: reading a tokenizer.json needs the 'tokenizers' library, which is not installed "
                         f"({EXTRA_HINT})") from err
    try:
        text = data.decode("utf-8")
        return HFTokenizer.from_str(text)
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not a tokenizer.json (not UTF-8 text: byte offset {err.start})") from err
    except Exception as err:  # noqa: BLE001 (the library raises plain Exception for a malformed file)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UsageError(f"{path}: not a Hugging Face tokenizer.json ({first[:200]})") from err


def _switch_off_batch_dependence(path: Path, backend: Any) -> None:
    """Truncation cuts documents and padding makes ids depend on the batch: switch both off, say so."""
    if backend.truncation is not None:
        log.warning("%s: truncation (max_length %s) switched off: documents are tokenized whole",
                    path, backend.truncation.get("max_length"))
        backend.no_truncation()
    if backend.padding is not None:
        log.warning("%s: padding switched off: a document's ids must not depend on its batch", path)
        backend.no_padding()


def _choose_eos(path: Path, backend: Any, eos: str | None) -> tuple[str, int]:
    specials = sorted(t.content for t in backend.get_added_tokens_decoder().values() if t.special)
    if eos is not None:
        eos_id = backend.token_to_id(eos)
        if eos_id is None:
            raise UsageError(f"{path}: --eos {eos!r} is not a token of this tokenizer "
                             f"(its special tokens: {specials or 'none'})")
        return eos, int(eos_id)
    for candidate in EOS_CANDIDATES:
        if candidate in specials:
            return candidate, int(backend.token_to_id(candidate))
    raise UsageError(f"{path}: no end-of-document token: none of the special tokens {list(EOS_CANDIDATES)} is in this "
                     f"tokenizer (its special tokens: {specials or 'none'}); name one with --eos TOKEN")


def _warn_if_eos_added(path: Path, tokenizer: Tokenizer) -> None:
    probe = tokenizer.backend.encode("a").ids
    if probe and probe[-1] == tokenizer.eos_id:
        log.warning("%s: the post-processor already ends every encoding with %r; documents end in two of them "
                    "(shardfeed appends the EOS to what encode() gives)", path, tokenizer.eos)


_fork_hook_registered = False


def _keep_library_threads_off() -> None:
    """Keep the library's Rayon pool unused here, and off in every process forked from here (module docstring)."""
    global _fork_hook_registered
    os.environ.setdefault(PARALLELISM_ENV, "false")
    if not _fork_hook_registered:
        os.register_at_fork(after_in_child=_child_threads_off)
        _fork_hook_registered = True
    value = os.environ[PARALLELISM_ENV].strip().lower()
    if value not in ("", "0", "false", "f", "no", "n", "off"):
        log.warning("%s=%s: the tokenizers library adds its own threads to shardfeed's; processes forked after "
                    "that tokenize on one thread", PARALLELISM_ENV, os.environ[PARALLELISM_ENV])


def _child_threads_off() -> None:
    # A forked child has none of the parent's Rayon threads: a call that waits for them never returns.
    os.environ[PARALLELISM_ENV] = "false"


def default_threads() -> int:
    """The CPUs this process may use (``dataprep.cpus``: the affinity mask capped by the cgroup quota)."""
    return cpus_available()


def split_balanced(texts: Sequence[str], pieces: int) -> list[slice]:
    """Cut ``texts`` into at most ``pieces`` consecutive slices of about equal characters (none empty)."""
    if not texts:
        return []
    sizes = np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts))
    ends = np.cumsum(sizes)
    targets = ends[-1] * np.arange(1, pieces + 1) / pieces
    cuts = np.unique(np.minimum(np.searchsorted(ends, targets, side="left") + 1, len(texts)))
    starts = np.concatenate([[0], cuts[:-1]])
    return [slice(int(a), int(b)) for a, b in zip(starts, cuts) if b > a]


class TokenEncoder:
    """Tokenizes batches of documents on ``threads`` threads, each calling ``Tokenizer.encode_batch``.

    ``encode_batch(texts)`` returns what ``tokenizer.encode_batch(texts)`` returns (same
    arrays, same order), computed by cutting the batch into pieces balanced by characters.
    Threads start at the first call and stop at ``close`` (or the end of a ``with`` block);
    the constructor starts nothing. ``threads=1`` runs on the calling thread. Batches of a
    few hundred documents or more keep every thread busy. Not for use from several threads.
    """

    def __init__(self, tokenizer: Tokenizer, *, threads: int | None = None) -> None:
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"'tokenizer' must be a Tokenizer (got {tokenizer!r} that is a {type(tokenizer).__name__})")
        require_int("threads", threads, minimum=1, optional=True, error=ValueError)
        self._tokenizer = tokenizer
        self._threads = default_threads() if threads is None else threads
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's ids then the EOS id, 1-D arrays of ``tokenizer.dtype``, in input order."""
        if self._closed:
            raise ValueError("encode_batch() on a TokenEncoder that was closed")
        parts = split_balanced(texts, self._threads * PIECES_PER_THREAD)
        if self._threads == 1 or len(parts) <= 1:
            return self._tokenizer.encode_batch(texts)
        pool = self._pool or self._start()
        encode: Callable[[Sequence[str]], list[np.ndarray]] = self._tokenizer.encode_batch
        futures: list[Future[list[np.ndarray]]] = [pool.submit(encode, texts[part]) for part in parts]
        try:
            return [doc for future in futures for doc in future.result()]
        finally:
            for future in futures:
                future.cancel()

    def _start(self) -> ThreadPoolExecutor:
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="dataprep-tokenize")
        return self._pool

    def close(self) -> None:
        """Stop the threads (after the pieces already running); further calls are refused."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> TokenEncoder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
