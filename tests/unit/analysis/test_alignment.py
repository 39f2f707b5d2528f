"""Key translation and norm scaling change no attention weight."""

import numpy as np
import pytest

from qkviz.core.alignment import Alignment, align_head
from qkviz.core.attention import attention_probs
from qkviz.core import LogitRule


def head_with_offsets(seed: int = 0, n_tokens: int = 60, d_head: int = 16):
    rng = np.random.default_rng(seed)
    queries = rng.normal(0.5, 1.0, (n_tokens, d_head)) + 3.0     # offset centroid
    keys = rng.normal(-2.0, 2.5, (n_tokens, d_head))             # other centroid, larger norms
    return queries, keys


@pytest.mark.parametrize("alignment", [Alignment(), Alignment(True, False), Alignment(False, True)])
@pytest.mark.parametrize("causal", [False, True])
def test_alignment_preserves_every_sentence_attention(alignment, causal):
    queries, keys = head_with_offsets()
    aligned = align_head(queries, keys, alignment)
    for start, end in ((0, 7), (7, 30), (30, 60)):  # three "sentences" of one run
        before = attention_probs(queries[start:end], keys[start:end], LogitRule(0.3, causal=causal))
        after = attention_probs(aligned.queries[start:end], aligned.keys[start:end], LogitRule(0.3, causal=causal))
        np.testing.assert_allclose(after, before, atol=1e-5)


def test_translation_meets_centroids_and_scaling_equalises_mean_norms():
    queries, keys = head_with_offsets(1)
    aligned = align_head(queries, keys)
    assert aligned.points.shape == (120, 16) and aligned.points.dtype == np.float32
    q, k = aligned.queries.astype(np.float64), aligned.keys.astype(np.float64)
    np.testing.assert_allclose(q.mean(axis=0) / aligned.norm_scale, k.mean(axis=0) * aligned.norm_scale, atol=1e-4)
    assert np.linalg.norm(q, axis=1).mean() == pytest.approx(np.linalg.norm(k, axis=1).mean(), rel=1e-5)


def test_translation_alone_changes_logits_and_is_caught():
    """Without the constant-per-query argument the logits do change: the test above can fail."""
    queries, keys = head_with_offsets(2)
    aligned = align_head(queries, keys, Alignment(translate_keys=True, scale_norms=False))
    assert not np.allclose(queries @ keys.T, aligned.queries @ aligned.keys.T, atol=1e-2)


def test_nothing_applied_is_the_identity():
    queries, keys = head_with_offsets(3)
    aligned = align_head(queries, keys, Alignment(False, False))
    np.testing.assert_allclose(aligned.points, np.concatenate([queries, keys]), rtol=1e-6)


def test_alignment_preserves_a_real_runs_attention(tiny_model, tiny_corpus, tmp_path):
    import qkviz

    run = qkviz.extract(str(tiny_model("qwen2")), tiny_corpus, tmp_path / "run", max_sentences=10)
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            aligned = align_head(run.queries(layer, head), run.keys(layer, head))
            for sentence in range(run.n_sentences):
                rows = run.sentence_tokens(sentence)
                recomputed = attention_probs(aligned.queries[rows], aligned.keys[rows], run.logit_rule(layer, head))
                np.testing.assert_allclose(recomputed, run.attention(layer, head, sentence), atol=1e-5)
