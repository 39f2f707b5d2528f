"""The one recomputation of attention logits: scale, soft cap, window and causal masks against direct formulas."""

import numpy as np
import pytest

from qkviz.core.attention import (allowed_keys, allowed_pairs, attention_logits, attention_probs, dot_logits,
                                  masked_softmax)


@pytest.fixture
def head():
    rng = np.random.default_rng(0)
    return rng.normal(size=(7, 4)) * 3, rng.normal(size=(7, 4)) * 3


def test_logits_are_scaled_then_soft_capped(head):
    queries, keys = head
    direct = 5.0 * np.tanh(0.5 * (queries @ keys.T) / 5.0)
    np.testing.assert_allclose(attention_logits(queries, keys, 0.5, softcap=5.0), direct, rtol=1e-12)
    np.testing.assert_allclose(attention_logits(queries, keys, 0.5), 0.5 * queries @ keys.T, rtol=1e-12)
    assert np.abs(attention_logits(queries, keys, 10.0, softcap=2.0)).max() <= 2.0       # the cap bounds them
    np.testing.assert_allclose(dot_logits(queries @ keys.T, 0.5, 5.0), direct, rtol=1e-12)


def test_a_batch_of_sentences_gets_each_sentences_logits(head):
    queries, keys = head
    batch = attention_logits(np.stack([queries, queries[::-1]]), np.stack([keys, keys[::-1]]), 0.5, 5.0)
    np.testing.assert_allclose(batch[1], attention_logits(queries[::-1], keys[::-1], 0.5, 5.0), rtol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 1, 3, 20])
def test_the_mask_is_the_causal_and_window_rule(causal, window):
    query, key = np.meshgrid(np.arange(9), np.arange(9), indexing="ij")
    direct = (key <= query) if causal else np.ones((9, 9), dtype=bool)
    if window is not None:
        direct = direct & (np.abs(query - key) < window)
    np.testing.assert_array_equal(allowed_pairs(9, causal, window), direct)
    lo, hi = allowed_keys(np.arange(9), 9, causal, window)
    np.testing.assert_array_equal(hi - lo, direct.sum(axis=1))


def test_masked_pairs_get_no_logit_and_no_attention(head):
    queries, keys = head
    allowed = allowed_pairs(7, True, 3)
    logits = attention_logits(queries, keys, 0.5, 5.0, allowed=allowed)
    assert np.isneginf(logits[~allowed]).all() and np.isfinite(logits[allowed]).all()
    probs = attention_probs(queries, keys, 0.5, causal=True, sliding_window=3, softcap=5.0)
    direct = np.where(allowed, np.exp(5.0 * np.tanh(0.5 * (queries @ keys.T) / 5.0)), 0.0)
    np.testing.assert_allclose(probs, direct / direct.sum(axis=1, keepdims=True), rtol=1e-12)
    assert (masked_softmax(np.zeros((2, 3)), np.zeros((2, 3), dtype=bool)) == 0).all()    # nothing allowed: all 0
