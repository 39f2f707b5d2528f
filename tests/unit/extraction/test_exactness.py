"""Every family: attention recomputed from the stored queries and keys equals the model's own."""

import numpy as np
import pytest
from support.attention_check import max_attention_error
from support.tiny_models import FAMILIES

import qkviz
from qkviz.extraction.streaming.text_capture import pad_token_id
from transformers import AutoTokenizer

TOLERANCE = {"float32": 1e-5, "float16": 2e-3}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_stored_vectors_reproduce_model_attention(family, dtype, tiny_model, tiny_corpus, tmp_path):
    model_dir = tiny_model(family)
    # Extraction batches are sorted by length (batch 8); the reference is one padded batch of all 24.
    run = qkviz.extract(str(model_dir), tiny_corpus, tmp_path / "run", max_sentences=24, seed=3,
                        dtype=dtype, batch_size=8)
    pad = pad_token_id(AutoTokenizer.from_pretrained(model_dir))
    error, departure = max_attention_error(run, model_dir, list(range(run.n_sentences)), pad)
    assert error <= TOLERANCE[dtype], f"{family} {dtype}: max abs error {error:.2e}"
    assert departure > 0.2, "attention is near uniform: the comparison would not catch an error"


@pytest.mark.parametrize("family", ["gpt2", "gemma3", "mistral"])
def test_recorded_scales_and_windows_are_the_models(family, tiny_model, tiny_corpus, tmp_path):
    run = qkviz.extract(str(tiny_model(family)), tiny_corpus, tmp_path / "run", max_sentences=4)
    scales = [run.scale(layer) for layer in range(run.n_layers)]
    windows = [run.sliding_window(layer) for layer in range(run.n_layers)]
    if family == "gpt2":   # scale_attn_by_inverse_layer_idx
        assert scales == pytest.approx([16 ** -0.5 / (layer + 1) for layer in range(run.n_layers)])
    if family == "gemma3":  # query_pre_attn_scalar=24, layers sliding, sliding, full
        assert scales == pytest.approx([24 ** -0.5] * 3)
        assert windows == [5, 5, None]
    if family == "mistral":
        assert windows == [6, 6]


def test_a_wrong_scale_is_caught(tiny_model, tiny_corpus, tmp_path):
    """The comparison can fail: a 2% error in the recorded scale exceeds the tolerance."""
    model_dir = tiny_model("llama")
    run = qkviz.extract(str(model_dir), tiny_corpus, tmp_path / "run", max_sentences=8)
    run.manifest["attention"]["scales"] = [s * 1.02 for s in run.manifest["attention"]["scales"]]
    pad = pad_token_id(AutoTokenizer.from_pretrained(model_dir))
    error, _ = max_attention_error(run, model_dir, list(range(run.n_sentences)), pad)
    assert error > TOLERANCE["float16"]


def test_grouped_query_heads_share_their_key_head(tiny_model, tiny_corpus, tmp_path):
    run = qkviz.extract(str(tiny_model("llama")), tiny_corpus, tmp_path / "run", max_sentences=4)
    assert (run.n_heads, run.n_kv_heads) == (4, 2)
    assert [run.kv_head(h) for h in range(4)] == [0, 0, 1, 1]
    np.testing.assert_array_equal(run.keys(1, 0), run.keys(1, 1))
    assert not np.array_equal(run.keys(1, 1), run.keys(1, 2))
    assert not np.array_equal(run.queries(1, 0), run.queries(1, 1))
