"""Token output (``dataprep shard RAW OUT --tokenizer TOK``) from the user's side: the CLI, the files, Megatron.

The corpus is ``dataprep.synthetic``'s (``--documents``), made once per session in every raw
layout a token run reads (``tests.dataprep.token_samples.TokenCorpus``); shards are read with
the ``megatron-core`` package's ``IndexedDataset`` and compared with what the ``tokenizers``
library itself makes of each kept text, plus the EOS.
"""

from __future__ import annotations

import pytest

from tests.dataprep.token_samples import TokenCorpus, make_token_corpus

DOCUMENTS = 300


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> TokenCorpus:
    """The synthetic corpus of ``DOCUMENTS`` documents in every layout, with its BPE; shared read-only."""
    pytest.importorskip("tokenizers")
    return make_token_corpus(tmp_path_factory.mktemp("token-corpus"), DOCUMENTS)

