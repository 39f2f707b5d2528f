"""The one recomputation of attention logits: scale, soft cap, window, chunk and causal masks, ALiBi and sink
logits against direct formulas."""

import numpy as np
import pytest

from qkviz.core import LogitRule
from qkviz.core.attention import (allowed_keys, allowed_pairs, attention_logits, attention_probs, dot_logits,
                                  masked_softmax)


@pytest.fixture
def head():
    rng = np.random.default_rng(0)
    return rng.normal(size=(7, 4)) * 3, rng.normal(size=(7, 4)) * 3


def test_logits_are_scaled_then_soft_capped(head):
    queries, keys = head
    direct = 5.0 * np.tanh(0.5 * (queries @ keys.T) / 5.0)
    capped = LogitRule(0.5, softcap=5.0)
    np.testing.assert_allclose(attention_logits(queries, keys, capped), direct, rtol=1e-12)
    np.testing.assert_allclose(attention_logits(queries, keys, LogitRule(0.5)), 0.5 * queries @ keys.T, rtol=1e-12)
    assert np.abs(attention_logits(queries, keys, LogitRule(10.0, softcap=2.0))).max() <= 2.0       # the cap bounds them
    np.testing.assert_allclose(dot_logits(queries @ keys.T, capped), direct, rtol=1e-12)


def test_a_batch_of_sentences_gets_each_sentences_logits(head):
    queries, keys = head
    rule = LogitRule(0.5, softcap=5.0, alibi_slope=0.25)
    batch = attention_logits(np.stack([queries, queries[::-1]]), np.stack([keys, keys[::-1]]), rule)
    np.testing.assert_allclose(batch[1], attention_logits(queries[::-1], keys[::-1], rule), rtol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 1, 3, 20])
@pytest.mark.parametrize("chunk", [None, 1, 4, 20])
def test_the_mask_is_the_causal_window_and_chunk_rule(causal, window, chunk):
    query, key = np.meshgrid(np.arange(9), np.arange(9), indexing="ij")
    direct = (key <= query) if causal else np.ones((9, 9), dtype=bool)
    if window is not None:
        direct = direct & (np.abs(query - key) < window)
    if chunk is not None:
        direct = direct & (query // chunk == key // chunk)
    rule = LogitRule(1.0, causal=causal, window=window, chunk=chunk)
    np.testing.assert_array_equal(allowed_pairs(9, rule), direct)
    lo, hi = allowed_keys(np.arange(9), 9, rule)
    np.testing.assert_array_equal(hi - lo, direct.sum(axis=1))


def test_masked_pairs_get_no_logit_and_no_attention(head):
    queries, keys = head
    rule = LogitRule(0.5, causal=True, window=3, softcap=5.0)
    allowed = allowed_pairs(7, rule)
    logits = attention_logits(queries, keys, rule, allowed=allowed)
    assert np.isneginf(logits[~allowed]).all() and np.isfinite(logits[allowed]).all()
    probs = attention_probs(queries, keys, rule)
    direct = np.where(allowed, np.exp(5.0 * np.tanh(0.5 * (queries @ keys.T) / 5.0)), 0.0)
    np.testing.assert_allclose(probs, direct / direct.sum(axis=1, keepdims=True), rtol=1e-12)
    assert (masked_softmax(np.zeros((2, 3)), np.zeros((2, 3), dtype=bool)) == 0).all()    # nothing allowed: all 0


def test_alibi_adds_the_slope_times_the_distance_to_the_key(head):
    queries, keys = head
    rule = LogitRule(0.5, causal=True, alibi_slope=0.3)
    query, key = np.meshgrid(np.arange(7), np.arange(7), indexing="ij")
    direct = 0.5 * queries @ keys.T + 0.3 * (key - query)
    np.testing.assert_allclose(attention_logits(queries, keys, rule), direct, rtol=1e-12)
    np.testing.assert_allclose(dot_logits(queries @ keys.T, rule, key - query), direct, rtol=1e-12)
    np.testing.assert_allclose(dot_logits(queries @ keys.T, rule), 0.5 * queries @ keys.T, rtol=1e-12)   # across sentences
    weights = np.where(key <= query, np.exp(direct), 0.0)
    np.testing.assert_allclose(attention_probs(queries, keys, rule), weights / weights.sum(1, keepdims=True), rtol=1e-12)
    # a part of the sentence, at its own positions: the same logits as those rows and columns of the whole
    part = attention_logits(queries[3:6], keys[1:5], rule, query_positions=np.arange(3, 6), key_positions=np.arange(1, 5))
    np.testing.assert_allclose(part, direct[3:6, 1:5], rtol=1e-12)
    assert not np.allclose(attention_probs(queries, keys, rule), attention_probs(queries, keys, LogitRule(0.5, causal=True)))


def test_a_sink_takes_its_share_of_every_row(head):
    queries, keys = head
    rule = LogitRule(0.5, causal=True, sink=1.5)
    probs = attention_probs(queries, keys, rule)
    logits = np.where(np.tril(np.ones((7, 7), dtype=bool)), 0.5 * queries @ keys.T, -np.inf)
    total = np.exp(logits).sum(axis=1) + np.exp(1.5)
    np.testing.assert_allclose(probs, np.exp(logits) / total[:, None], rtol=1e-12)
    np.testing.assert_allclose(probs.sum(axis=1), 1 - np.exp(1.5) / total, rtol=1e-12)
    assert (probs.sum(axis=1) < 1).all()
    # far larger than any logit: no overflow, nearly all the mass on the sink
    huge = attention_probs(queries, keys, LogitRule(0.5, causal=True, sink=800.0))
    assert np.isfinite(huge).all() and huge.sum(axis=1).max() < 1e-100
    assert (masked_softmax(np.zeros((2, 3)), np.zeros((2, 3), dtype=bool), sink=1.0) == 0).all()


def test_a_rule_refuses_an_empty_window_or_chunk():
    with pytest.raises(ValueError, match="chunk"):
        LogitRule(1.0, chunk=0)
