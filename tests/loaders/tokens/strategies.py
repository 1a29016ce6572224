"""Hypothesis strategies for the token-path tests (one place, as STYLE.md asks)."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.loaders.tokens.corpus import EOS

seeds = st.integers(min_value=0, max_value=2**64 - 1)
epochs = st.integers(min_value=0, max_value=10_000)
sizes = st.integers(min_value=0, max_value=3000)
seq_lens = st.integers(min_value=1, max_value=40)

# Document bodies of byte tokens (EOS is appended by the corpus helper): many short or empty
# ones, some longer than several windows, EOS never inside a body.
bodies = st.lists(st.lists(st.integers(min_value=0, max_value=255), max_size=90), min_size=1, max_size=40)

# Weights of 1..6 sources: zero allowed, at least one positive; ints, floats or both.
_weight = st.one_of(st.integers(min_value=0, max_value=20),
                    st.floats(min_value=0.0, max_value=10.0, allow_nan=False, allow_infinity=False))
weight_lists = st.lists(_weight, min_size=1, max_size=6).filter(lambda ws: sum(ws) > 0)

__all__ = ["EOS", "bodies", "epochs", "seeds", "seq_lens", "sizes", "weight_lists"]
