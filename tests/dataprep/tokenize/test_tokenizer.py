"""dataprep.tokenize.tokenizer: both kinds, the EOS rules, every usage error, threads, and forks."""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataprep.errors import UsageError
from dataprep.tokenize.tokenizer import (BYTES_EOS, PARALLELISM_ENV, TokenEncoder, Tokenizer, load_tokenizer,
                                         split_balanced)
from tests.dataprep.token_samples import corpus_texts, word_level

tokenizers = pytest.importorskip("tokenizers")
ROOT = Path(__file__).resolve().parents[3]


def reference_ids(path: Path, text: str, eos_id: int) -> list[int]:
    """What a user gets: the library's default encode of the file, then the EOS."""
    return [*tokenizers.Tokenizer.from_file(str(path)).encode(text).ids, eos_id]


def save_with(path: Path, source: Path, change: object) -> Path:
    tokenizer = tokenizers.Tokenizer.from_file(str(source))
    change(tokenizer)  # type: ignore[operator]
    tokenizer.save(str(path))
    return path


# ----------------------------------------------------------------------------- a tokenizer.json


def test_documents_are_the_library_encoding_then_eos(bpe: Tokenizer, bpe_path: Path) -> None:
    texts = corpus_texts(60)
    docs = bpe.encode_batch(texts)
    assert len(docs) == len(texts)
    for text, doc in zip(texts, docs, strict=True):
        assert doc.dtype == np.uint16 and doc.ndim == 1
        assert doc.tolist() == reference_ids(bpe_path, text, bpe.eos_id)
    assert bpe.encode(texts[7]).tolist() == docs[7].tolist()
    assert bpe.encode("").tolist() == [bpe.eos_id]


def test_identity_and_manifest_block(bpe: Tokenizer, bpe_path: Path) -> None:
    assert (bpe.name, bpe.eos, bpe.eos_id, bpe.path) == ("tokenizer.json", "<|endoftext|>", 0, bpe_path)
    assert bpe.sha256 == hashlib.sha256(bpe_path.read_bytes()).hexdigest()
    assert bpe.vocab_size == 600 and bpe.dtype == np.uint16
    assert bpe.manifest_block() == {"name": "tokenizer.json", "sha256": bpe.sha256, "vocab_size": 600,
                                    "eos": "<|endoftext|>", "eos_id": 0, "dtype": "uint16"}
    assert load_tokenizer(bpe_path) == bpe  # equal identity, whatever the library object
    copy = bpe_path.parent / "copy" / "tokenizer.json"
    copy.parent.mkdir(exist_ok=True)
    copy.write_bytes(bpe_path.read_bytes())
    assert load_tokenizer(copy) == bpe and load_tokenizer(copy).path == copy


def test_vocab_size_counts_added_tokens_and_picks_int32_past_65500(tmp_path: Path) -> None:
    small = load_tokenizer(word_level(tmp_path / "small.json", 100, specials=("<pad>", "</s>")))
    assert small.vocab_size == 103 and small.eos_id == 102  # 100 words, [UNK], <pad>, </s>
    big = load_tokenizer(word_level(tmp_path / "big.json", 65_499))  # + [UNK] + EOS = 65,501 ids
    assert big.vocab_size == 65_501 and big.dtype == np.int32
    doc = big.encode("w65498 w3 nope")
    assert doc.dtype == np.int32 and doc.tolist() == [65_498, 3, 65_499, 65_500]
    edge = load_tokenizer(word_level(tmp_path / "edge.json", 65_497))
    assert edge.vocab_size == 65_499 and edge.dtype == np.uint16


def test_a_post_processor_bos_is_kept_as_encode_gives_it(tmp_path: Path, bpe_path: Path) -> None:
    def add_bos(tokenizer: object) -> None:
        tokenizer.add_special_tokens(["<s>"])  # type: ignore[attr-defined]
        bos = tokenizer.token_to_id("<s>")  # type: ignore[attr-defined]
        tokenizer.post_processor = tokenizers.processors.TemplateProcessing(  # type: ignore[attr-defined]
            single="<s> $A", special_tokens=[("<s>", bos)])

    path = save_with(tmp_path / "bos.json", bpe_path, add_bos)
    tokenizer = load_tokenizer(path)
    texts = corpus_texts(12)
    for text, doc in zip(texts, tokenizer.encode_batch(texts), strict=True):
        assert doc[0] == tokenizer.backend.token_to_id("<s>")
        assert doc.tolist() == reference_ids(path, text, tokenizer.eos_id)


def test_a_post_processor_that_appends_the_eos_is_warned_about(tmp_path: Path, bpe_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    def add_eos(tokenizer: object) -> None:
        tokenizer.post_processor = tokenizers.processors.TemplateProcessing(  # type: ignore[attr-defined]
            single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", 0)])

    path = save_with(tmp_path / "eos.json", bpe_path, add_eos)
    with caplog.at_level(logging.WARNING, logger="dataprep.tokenize.tokenizer"):
        tokenizer = load_tokenizer(path)
    assert "two of them" in caplog.text and str(path) in caplog.text
    assert tokenizer.encode("hi").tolist()[-2:] == [0, 0]


def test_a_pickled_tokenizer_encodes_the_same_with_its_settings(tmp_path: Path, bpe_path: Path) -> None:
    path = save_with(tmp_path / "cut.json", bpe_path, lambda tokenizer: tokenizer.enable_truncation(4))
    tokenizer = load_tokenizer(path)
    copy = pickle.loads(pickle.dumps(tokenizer))
    texts = corpus_texts(20)
    assert copy == tokenizer and copy.path == path
    assert [d.tolist() for d in copy.encode_batch(texts)] == [d.tolist() for d in tokenizer.encode_batch(texts)]
    assert max(len(d) for d in copy.encode_batch(texts)) > 5  # truncation stays off in the copy


def test_truncation_and_padding_in_the_file_are_switched_off(tmp_path: Path, bpe_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    def cut_and_pad(tokenizer: object) -> None:
        tokenizer.enable_truncation(8)  # type: ignore[attr-defined]
        tokenizer.enable_padding(pad_id=0, pad_token="<|endoftext|>")  # type: ignore[attr-defined]

    path = save_with(tmp_path / "cut.json", bpe_path, cut_and_pad)
    with caplog.at_level(logging.WARNING, logger="dataprep.tokenize.tokenizer"):
        tokenizer = load_tokenizer(path)
    assert "truncation (max_length 8) switched off" in caplog.text and "padding switched off" in caplog.text
    texts = ["short", corpus_texts(30)[-1]]
    docs = tokenizer.encode_batch(texts)
    assert [d.tolist() for d in docs] == [reference_ids(bpe_path, t, 0) for t in texts]
    assert len(docs[1]) > 9 and len(docs[0]) < len(docs[1])


# ----------------------------------------------------------------------------- EOS rules


@pytest.mark.parametrize(("specials", "expected"), [
    (("<pad>", "</s>", "<eos>", "<|endoftext|>"), "<|endoftext|>"),
    (("<eos>", "</s>"), "</s>"),
    (("<pad>", "<eos>"), "<eos>"),
])
def test_the_default_eos_is_the_first_candidate_present(tmp_path: Path, specials: tuple[str, ...],
                                                        expected: str) -> None:
    tokenizer = load_tokenizer(word_level(tmp_path / "t.json", 10, specials=specials))
    assert tokenizer.eos == expected and tokenizer.eos_id == tokenizer.backend.token_to_id(expected)
    assert tokenizer.encode("w1 w2").tolist() == [1, 2, tokenizer.eos_id]


def test_no_default_eos_is_a_usage_error_naming_the_candidates(tmp_path: Path) -> None:
    path = word_level(tmp_path / "t.json", 10, specials=("<pad>",))
    with pytest.raises(UsageError) as failure:
        load_tokenizer(path)
    message = str(failure.value)
    assert str(path) in message and "'<|endoftext|>', '</s>', '<eos>'" in message and "--eos" in message
    assert "<pad>" in message


def test_eos_names_any_token_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    path = word_level(tmp_path / "t.json", 10, specials=("<pad>",))
    tokenizer = load_tokenizer(path, eos="w9")
    assert (tokenizer.eos, tokenizer.eos_id) == ("w9", 9) and tokenizer.encode("w1").tolist() == [1, 9]
    with pytest.raises(UsageError, match=r"t\.json: --eos '<\|im_end\|>' is not a token of this tokenizer"):
        load_tokenizer(path, eos="<|im_end|>")


# ----------------------------------------------------------------------------- bytes


def test_bytes_tokenizer_is_utf8_bytes_then_256() -> None:
    tokenizer = load_tokenizer("bytes")
    assert (tokenizer.name, tokenizer.vocab_size, tokenizer.eos, tokenizer.eos_id) == ("bytes", 257, BYTES_EOS, 256)
    assert tokenizer.sha256 == hashlib.sha256(b"shardfeed-bytes-v1").hexdigest()
    assert tokenizer.dtype == np.uint16 and tokenizer.path is None and tokenizer.backend is None
    texts = ["", "ab", "é東"]
    assert [d.tolist() for d in tokenizer.encode_batch(texts)] == [[*t.encode("utf-8"), 256] for t in texts]
    assert load_tokenizer("bytes", eos=BYTES_EOS) == tokenizer
    with pytest.raises(UsageError, match=r"--eos '</s>': the 'bytes' tokenizer's EOS is '<\|endoftext\|>' \(id 256\)"):
        load_tokenizer("bytes", eos="</s>")


# ----------------------------------------------------------------------------- usage errors


def test_a_missing_file_is_a_usage_error_that_says_nothing_is_fetched(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"gpt2: no such tokenizer file .* never fetched"):
        load_tokenizer("gpt2")
    with pytest.raises(UsageError, match=r"missing\.json: no such tokenizer file"):
        load_tokenizer(tmp_path / "missing.json")


def test_a_directory_or_an_unreadable_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"a directory, not a tokenizer file"):
        load_tokenizer(tmp_path)
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)  # reading it fails (ELOOP) whatever the user's rights
    with pytest.raises(UsageError, match=r"loop\.json: cannot read the tokenizer file"):
        load_tokenizer(loop)


@pytest.mark.parametrize(("content", "message"), [
    (b"\xff\xfe not text", r"not a tokenizer.json \(not UTF-8 text: byte offset 0\)"),
    (b"{ this is not json", r"not a Hugging Face tokenizer.json \("),
    (b'{"version": "1.0", "model": {"type": "NoSuchModel"}}', r"not a Hugging Face tokenizer.json \("),
    (b"", r"not a Hugging Face tokenizer.json \("),
])
def test_a_file_that_is_not_a_tokenizer_is_a_usage_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=r"bad\.json: " + message):
        load_tokenizer(path)


def test_without_the_library_the_error_names_the_extra(bpe_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # what an uninstalled package looks like to import
    with pytest.raises(UsageError, match=r"tokenizer\.json: .*'tokenizers' library, which is not installed "
                                         r"\(pip install 'shardfeed\[tokens\]'\)"):
        load_tokenizer(bpe_path)
    assert load_tokenizer("bytes").vocab_size == 257  # the built-in one needs nothing


@pytest.mark.parametrize("spec", ["", 3, None])
def test_a_spec_that_is_no_path_is_refused(spec: object) -> None:
    with pytest.raises(UsageError, match="tokenizer must be a path to a tokenizer.json or 'bytes'"):
        load_tokenizer(spec)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- threads


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_token_encoder_gives_what_encode_batch_gives_in_order(bpe: Tokenizer, threads: int) -> None:
    texts = corpus_texts(150)
    expected = [d.tolist() for d in bpe.encode_batch(texts)]
    with TokenEncoder(bpe, threads=threads) as encoder:
        assert encoder.threads == threads and encoder.tokenizer is bpe
        assert [d.tolist() for d in encoder.encode_batch(texts)] == expected
        assert [d.tolist() for d in encoder.encode_batch(texts[:1])] == expected[:1]
        assert encoder.encode_batch([]) == []
    with pytest.raises(ValueError, match="closed"):
        encoder.encode_batch(texts)


def test_token_encoder_refuses_bad_arguments(bpe: Tokenizer) -> None:
    with pytest.raises(ValueError, match="'threads' must be a positive int or None"):
        TokenEncoder(bpe, threads=0)
    with pytest.raises(TypeError, match="'tokenizer' must be a Tokenizer"):
        TokenEncoder("bytes")  # type: ignore[arg-type]


@given(st.lists(st.text(max_size=30), max_size=40), st.integers(1, 12))
def test_split_balanced_cuts_consecutive_non_empty_slices_covering_all(texts: list[str], pieces: int) -> None:
    parts = split_balanced(texts, pieces)
    assert len(parts) <= pieces
    assert [i for part in parts for i in range(len(texts))[part]] == list(range(len(texts)))
    assert all(part.stop > part.start for part in parts)


# ----------------------------------------------------------------------------- forks


FORK_SCRIPT = textwrap.dedent("""
    import os, sys
    from dataprep.tokenize.tokenizer import load_tokenizer, TokenEncoder
    tokenizer = load_tokenizer(sys.argv[1])
    texts = ["hello world, this is a document " * 40] * 400
    before = len(os.listdir("/proc/self/task"))
    expected = [d.tolist() for d in tokenizer.encode_batch(texts)]  # where the library would start its pool
    started = len(os.listdir("/proc/self/task")) - before
    with TokenEncoder(tokenizer, threads=2) as encoder:
        assert [d.tolist() for d in encoder.encode_batch(texts)] == expected
    print("parent", os.environ.get("TOKENIZERS_PARALLELISM"), started, flush=True)
    pid = os.fork()
    if pid == 0:
        same = [d.tolist() for d in tokenizer.encode_batch(texts)] == expected
        print("child", os.environ.get("TOKENIZERS_PARALLELISM"), same, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
""")


def run_fork_script(path: Path, parallelism: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != PARALLELISM_ENV}
    if parallelism is not None:
        env[PARALLELISM_ENV] = parallelism
    # The timeout only turns a deadlocked child into a failure instead of a hung test run.
    return subprocess.run([sys.executable, "-c", FORK_SCRIPT, str(path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_library_threads_stay_off_and_a_forked_child_tokenizes(bpe_path: Path) -> None:
    done = run_fork_script(bpe_path, None)
    assert done.returncode == 0, done.stderr
    parent, child = (line.split() for line in done.stdout.splitlines())
    assert parent == ["parent", "false", "0"]  # no thread started: the library's pool stayed off
    assert child == ["child", "false", "True"]
    assert "huggingface/tokenizers" not in done.stderr


def test_a_child_forked_after_the_library_pool_ran_does_not_deadlock(bpe_path: Path) -> None:
    done = run_fork_script(bpe_path, "true")  # the user asked for the library's threads: its pool runs in the parent
    assert done.returncode == 0, done.stderr
    parent, child = (line.split() for line in done.stdout.splitlines())
    assert parent[:2] == ["parent", "true"] and int(parent[2]) >= 1  # the pool's threads
    assert child == ["child", "false", "True"]
    assert "adds its own threads" in done.stderr


UNPICKLE_SCRIPT = textwrap.dedent("""
    import os, pickle, sys
    tokenizer = pickle.loads(sys.stdin.buffer.read())  # as a Ray worker receives it: load_tokenizer never ran here
    texts = ["hello world, this is a document " * 40] * 400
    before = len(os.listdir("/proc/self/task"))
    ids = [d.tolist() for d in tokenizer.encode_batch(texts)]
    print(os.environ.get("TOKENIZERS_PARALLELISM"), len(os.listdir("/proc/self/task")) - before, len(ids), flush=True)
""")


def test_a_process_that_unpickles_a_tokenizer_keeps_the_library_threads_off(bpe: Tokenizer) -> None:
    """A Ray task tokenizes on the one thread it was given, not on the library's pool of all cores."""
    env = {k: v for k, v in os.environ.items() if k != PARALLELISM_ENV}
    done = subprocess.run([sys.executable, "-c", UNPICKLE_SCRIPT], cwd=ROOT, env=env, input=pickle.dumps(bpe),
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["false", "0", "400"]
