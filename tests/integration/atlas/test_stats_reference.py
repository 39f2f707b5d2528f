"""The head atlas's fast statistics and logit decomposition (in-place work, probabilities kept for the second
pass, diagonals for the profiles, the top two weights without a sort) equal the straightforward reference
(:mod:`support.stats_reference`, the code as first written) up to float rounding (the decomposition, float32 block by
block, within its bound of the float64 reference), on decoders and encoders, with rotary, biases, sliding windows,
padded multi-sentence batches and the second pass recomputed."""

import numpy as np
import pandas as pd
import pytest

from qkviz.analysis.statistics import attention_batches
from qkviz.analysis.statistics.attention_batches import key_spans, sentence_batches
from qkviz.analysis.statistics.head_stats import head_statistics
from qkviz.analysis.statistics.token_kinds import TokenKinds
from qkviz.analysis.logits.logit_decomposition import FLOAT32_BOUND, EmbeddingSplit, decompose_embeddings, decompose_head
from support import stats_reference as reference

RTOL, ATOL = 1e-9, 1e-12


def assert_same_statistics(found, expected):
    assert found.values.keys() == expected.values.keys()
    for name, value in expected.values.items():
        assert found.values[name] == pytest.approx(value, rel=RTOL, abs=ATOL), name
    np.testing.assert_allclose(found.relative_position, expected.relative_position, rtol=RTOL, atol=ATOL)
    pd.testing.assert_frame_equal(found.exemplars, expected.exemplars, check_exact=False, rtol=RTOL, atol=ATOL)


def assert_same_decomposition(found, expected):
    """Within the bound of the float32 block-wise decomposition: relative on the profiles (attention weights),
    absolute on the shares (parts of 1)."""
    assert found.terms == expected.terms
    np.testing.assert_allclose(found.profiles, expected.profiles, rtol=FLOAT32_BOUND, atol=ATOL)
    np.testing.assert_allclose(found.variance_share, expected.variance_share, rtol=0, atol=FLOAT32_BOUND)


@pytest.mark.parametrize("family", ["qwen2", "bert", "mistral", "gemma3"])
@pytest.mark.parametrize("max_cells, cache_bytes, row_block", [(1 << 22, 1 << 30, 256), (1 << 22, 1 << 30, 3),
                                                               (2000, 0, 3), (2000, 20000, 256)])
def test_fast_head_statistics_and_decomposition_equal_the_reference(tiny_run, family, max_cells, cache_bytes, row_block,
                                                                    monkeypatch):
    """``row_block`` 3: the attention of decoders (causal, sliding windows) block by block over the keys each block's
    rows may attend to, on these short sentences too."""
    monkeypatch.setattr(attention_batches, "ROW_BLOCK", row_block)
    run = tiny_run(family, max_sentences=30)
    kinds = TokenKinds.of(run)
    batches = sentence_batches(run, max_cells=max_cells)
    assert (len(batches) > 1) == (max_cells == 2000)
    assert max_cells > 2000 or any(len(batch.sentences) > 1 for batch in batches)   # padded batches
    blocked = [key_spans(batch, run.logit_rule(0, 0), attention_batches.batch_mask(batch, run.logit_rule(0, 0)))
               is not None for batch in batches]
    assert any(blocked) == (row_block == 3 and run.is_causal)
    for layer, head in [(0, 0), (1, 2), (run.n_layers - 1, run.n_heads - 1)]:
        found = head_statistics(run, layer, head, kinds, batches, 8, 5, cache_bytes=cache_bytes)
        assert_same_statistics(found, reference.head_statistics(run, layer, head, kinds, batches, 8, 5))
        assert_same_decomposition(decompose_head(run, layer, head, batches, 8),
                                  reference.decompose_head(run, layer, head, batches, 8))
    split = EmbeddingSplit.of(run)
    if split is not None:
        expected = reference.decompose(run, 0, batches, 8, ("token_token", "token_position", "position_token",
                                                            "position_position", "embedding_other"),
                                       lambda batch: reference.embedding_terms(split, run, 1, batch))
        assert_same_decomposition(decompose_embeddings(run, split, 1, batches, 8), expected)
    assert family != "bert" or split is not None


@pytest.mark.parametrize("family, layer", [("qwen2", 1), ("mistral", 0), ("gemma3", 2), ("bert", 1)])
@pytest.mark.parametrize("max_cells", [1 << 22, 3000])
def test_float32_blocks_are_within_the_bound_of_the_float64_decomposition(tiny_run, family, layer, max_cells):
    """Query blocks of one row, a few rows, a few hundred cells and whole batches (causal: keys up to the block's last
    query; sliding window: from its first query's first key) against the float64 reference over whole batches."""
    from qkviz.analysis.logits.logit_decomposition import BLOCK_CELLS

    run = tiny_run(family, max_sentences=30)
    batches = sentence_batches(run, max_cells=max_cells)
    expected = reference.decompose_head(run, layer, 1, batches, 12)
    assert np.isfinite(expected.profiles).any() and np.abs(expected.variance_share).max() > 0.01
    found = {cells: decompose_head(run, layer, 1, batches, 12, block_cells=cells) for cells in (1, 700, 5000, BLOCK_CELLS)}
    for cells, result in found.items():
        assert_same_decomposition(result, expected)
        # the blocks only change the order of float32 sums: the same answer whatever their size
        np.testing.assert_allclose(result.profiles, found[BLOCK_CELLS].profiles, rtol=1e-6, atol=ATOL)
        np.testing.assert_allclose(result.variance_share, found[BLOCK_CELLS].variance_share, rtol=0, atol=1e-6)
    split = EmbeddingSplit.of(run)
    if split is not None:
        expected = reference.decompose(run, 0, batches, 12, ("token_token", "token_position", "position_token",
                                                             "position_position", "embedding_other"),
                                       lambda batch: reference.embedding_terms(split, run, 1, batch))
        for cells in (1, 700, BLOCK_CELLS):
            assert_same_decomposition(decompose_embeddings(run, split, 1, batches, 12, block_cells=cells), expected)
