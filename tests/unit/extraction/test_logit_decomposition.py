"""The logit decomposition: the model's own pre-rotation vectors and biases, terms that add up."""

import numpy as np
import pytest
import torch
from transformers import AutoModel

import qkviz
from qkviz.store import files as run_files
from qkviz.analysis.statistics.attention_batches import sentence_batches
from qkviz.analysis.logits.logit_decomposition import FLOAT32_BOUND, available_terms, batch_terms, decompose_head, unrotate


def projections_before_rotation(model_dir, token_ids, layer):
    """The model's own per-head queries and keys of one sentence before the rotary embedding:
    the output of the q / k projection, or of the QK-norm that follows it."""
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    attention = model.layers[layer].self_attn
    seen = {}
    query_module = getattr(attention, "q_norm", None) or attention.q_proj
    key_module = getattr(attention, "k_norm", None) or attention.k_proj
    query_module.register_forward_hook(lambda m, i, o: seen.setdefault("q", o))
    key_module.register_forward_hook(lambda m, i, o: seen.setdefault("k", o))
    with torch.no_grad():
        model(input_ids=torch.tensor([token_ids]))
    head_dim = model.config.head_dim

    def per_token(output, normed):   # QK-norm runs on [head, token, d_head]; projections give [token, width]
        return output[0].transpose(0, 1).numpy() if normed else output[0].reshape(len(token_ids), -1, head_dim).numpy()

    normed = getattr(attention, "q_norm", None) is not None
    return per_token(seen["q"], normed), per_token(seen["k"], normed)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_unrotating_stored_vectors_gives_the_models_pre_rotation_vectors(family, tiny_run, tiny_model):
    run = tiny_run(family)
    assert run.rotary(1) is not None
    rows = run.sentence_tokens(3)
    token_ids = run.tokens.token_id.to_numpy()[rows].tolist()
    queries, keys = projections_before_rotation(tiny_model(family), token_ids, 1)
    positions = np.arange(len(token_ids))
    for head in range(run.n_heads):
        ours = unrotate(run.queries(1, head)[rows], positions, *run.rotary(1))
        np.testing.assert_allclose(ours, queries[:, head], atol=2e-5)
        ours = unrotate(run.keys(1, head)[rows], positions, *run.rotary(1))
        np.testing.assert_allclose(ours, keys[:, run.kv_head(head)], atol=2e-5)


@pytest.mark.parametrize("family", ["bert", "gpt2", "distilbert", "qwen2"])
def test_biases_are_the_models_and_split_the_logit(family, tiny_run, tiny_model):
    run = tiny_run(family)
    model = AutoModel.from_pretrained(tiny_model(family))
    state = {name: value.numpy() for name, value in model.state_dict().items()}
    width = run.n_heads * run.head_dim
    expected = {"bert": lambda: state["encoder.layer.1.attention.self.query.bias"],
                "distilbert": lambda: state["transformer.layer.1.attention.q_lin.bias"],
                "gpt2": lambda: state["h.1.attn.c_attn.bias"][:width],
                "qwen2": lambda: state["layers.1.self_attn.q_proj.bias"]}[family]()
    np.testing.assert_array_equal(run.query_bias(1, 2), expected.reshape(run.n_heads, run.head_dim)[2])
    assert {"key_prior", "query_constant", "bias_bias"} <= set(available_terms(run))
    batches = sentence_batches(run)
    parts = batch_terms(run, 1, 2, batches[0], run.queries(1, 2), run.keys(1, 2))
    rows = np.maximum(batches[0].rows, 0)
    logits = np.einsum("bqd,bkd->bqk", run.queries(1, 2)[rows].astype(float), run.keys(1, 2)[rows].astype(float))
    np.testing.assert_allclose(sum(parts.values()), logits, atol=1e-9)
    found = decompose_head(run, 1, 2, batches, max_offset=8)
    shares = dict(zip(found.terms, found.variance_share))
    assert sum(shares.values()) == pytest.approx(1.0, abs=FLOAT32_BOUND)     # float32 terms (the total of them exactly)
    # Constant for each query: the softmax cancels them, and so does their share.
    assert shares["query_constant"] == pytest.approx(0, abs=1e-9)
    assert shares["bias_bias"] == pytest.approx(0, abs=1e-9)
    assert abs(shares["key_prior"]) > 1e-3     # a key-only prior moves attention
    assert found.profiles.shape == (len(found.terms), 17)


def test_a_run_without_logit_parts_has_only_the_content_term(tiny_run, tmp_path):
    import json
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(tiny_run("llama").path, copy)
    manifest = json.loads((copy / run_files.MANIFEST).read_text())
    for name in run_files.LOGIT_PART_FILES:
        manifest["files"].pop(name, None)
        (copy / name).unlink(missing_ok=True)
    manifest.pop("logit_parts")
    (copy / run_files.MANIFEST).write_text(json.dumps(manifest))
    old = qkviz.open_run(copy)
    assert old.rotary(0) is None and old.query_bias(0, 0) is None
    assert available_terms(old) == ("content",)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "gpt2"])
def test_first_layer_token_and_position_parts_add_up_to_the_stored_vectors(family, tiny_run):
    from qkviz.analysis.logits.logit_decomposition import EMBEDDING_TERMS, EmbeddingSplit, decompose_embeddings

    run = tiny_run(family)
    split = EmbeddingSplit.of(run)
    rows = np.arange(run.n_tokens)
    for head in range(run.n_heads):
        query, key = split.projections(run, head, rows)
        np.testing.assert_allclose(query.sum(axis=0), run.queries(0, head), atol=2e-5)
        np.testing.assert_allclose(key.sum(axis=0), run.keys(0, head), atol=2e-5)
    # The position parts alone differ between tokens only through their positions (and norm divisor).
    found = decompose_embeddings(run, split, 1, sentence_batches(run), max_offset=8)
    assert found.terms == EMBEDDING_TERMS
    assert sum(found.variance_share) == pytest.approx(1.0, abs=FLOAT32_BOUND)


def test_rotary_models_have_no_embedding_split(tiny_run):
    from qkviz.analysis.logits.logit_decomposition import EmbeddingSplit

    assert EmbeddingSplit.of(tiny_run("llama")) is None
