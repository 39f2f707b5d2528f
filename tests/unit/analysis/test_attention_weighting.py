"""qkviz.analysis's adjusted attention (the app's sentence view): hidden tokens and value-norm weighting."""

import numpy as np

from qkviz.analysis import adjusted_attention, hidden_tokens


def test_hiding_tokens_and_weighting_by_value_norm_renormalise():
    attention = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    hidden = hidden_tokens(np.arange(3), np.array([True, False, False]), hide_first=False, hide_special=True)
    assert hidden.tolist() == [True, False, False]
    weights = adjusted_attention(attention, hidden)
    assert np.allclose(weights, [[0, 0, 0], [0, 1, 0], [0, 0.375, 0.625]])
    weighted = adjusted_attention(attention, np.zeros(3, bool), np.array([1.0, 2.0, 1.0]))
    assert np.allclose(weighted[2], np.array([0.2, 0.6, 0.5]) / 1.3)
    assert np.allclose(weighted.sum(axis=1), 1)


def test_hidden_tokens_are_the_first_the_special_or_both():
    positions, special = np.array([0, 1, 2, 0, 1]), np.array([True, False, True, True, False])
    assert not hidden_tokens(positions, special, False, False).any()
    assert hidden_tokens(positions, special, True, False).tolist() == [True, False, False, True, False]
    assert hidden_tokens(positions, special, False, True).tolist() == special.tolist()
    assert hidden_tokens(positions, special, True, True).tolist() == [True, False, True, True, False]


def test_a_query_that_sees_only_hidden_keys_gets_a_zero_row_not_nan():
    attention = np.array([[1.0, 0.0], [0.4, 0.6]])
    weights = adjusted_attention(attention, np.array([True, False]))
    assert np.array_equal(weights, [[0.0, 0.0], [0.0, 1.0]])


def test_a_sink_keeps_its_share_when_tokens_are_hidden():
    """A head with a sink logit (gpt-oss): its rows sum to less than 1, and hiding a key gives the key's weight to
    the visible keys, not the sink's."""
    from qkviz.core import LogitRule
    from qkviz.core.attention import attention_probs

    rng = np.random.default_rng(0)
    attention = attention_probs(rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), LogitRule(1.0, causal=True, sink=0.5))
    shares = attention.sum(axis=1)
    assert (shares < 1).all()
    nothing_hidden = adjusted_attention(attention, np.zeros(5, bool))
    assert np.allclose(nothing_hidden, attention)          # the model's own attention, sink share and all
    first_hidden = adjusted_attention(attention, np.array([True, False, False, False, False]))
    assert np.allclose(first_hidden[1:].sum(axis=1), shares[1:]) and (first_hidden[:, 0] == 0).all()
    assert np.allclose(first_hidden[2, 1:3], attention[2, 1:3] * shares[2] / attention[2, 1:3].sum())
