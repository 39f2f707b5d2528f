"""The three real bundled models on the default corpus: the stored vectors reproduce their attention."""

import numpy as np
import pytest
from support.attention_check import max_attention_error
from support import CORPUS

import qkviz
from qkviz.extraction.streaming.text_capture import pad_token_id
from qkviz.extraction.models.loading import load_model, model_directory

pytestmark = pytest.mark.slow

TOLERANCE = {"float32": 1e-5, "float16": 2e-3}


def spread(run, count: int) -> list[int]:
    """``count`` sentences spread over the run, the longest one included."""
    chosen = set(np.linspace(0, run.n_sentences - 1, count - 1).astype(int).tolist())
    chosen.add(int(run.sentences.n_tokens.idxmax()))
    return sorted(chosen)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_minilm_on_the_default_corpus(dtype, tmp_path):
    run = qkviz.extract("minilm", CORPUS, tmp_path / "minilm", dtype=dtype)
    assert (run.n_layers, run.n_heads, run.n_kv_heads, run.head_dim) == (6, 12, 12, 32)
    assert run.n_sentences >= 300 and run.n_tokens >= 5000 and not run.is_causal
    assert run.tokens.token.iloc[0] == "[CLS]"
    loaded = load_model("minilm")
    error, departure = max_attention_error(run, model_directory("minilm")[0], spread(run, 24),
                                           pad_token_id(loaded.tokenizer))
    assert error <= TOLERANCE[dtype], f"minilm {dtype}: {error:.2e}"
    assert departure > 0.5


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_smollm2_on_the_default_corpus(dtype, tmp_path, smollm2_directory):  # converted once, under a lock
    run = qkviz.extract("smollm2", CORPUS, tmp_path / "smollm2", dtype=dtype, max_sentences=48, seed=7)
    assert (run.n_layers, run.n_heads, run.n_kv_heads, run.head_dim) == (30, 9, 3, 64)
    assert run.is_causal and run.family == "llama"
    assert run.scale(0) == pytest.approx(64 ** -0.5)
    loaded = load_model("smollm2")
    error, departure = max_attention_error(run, model_directory("smollm2")[0], spread(run, 16),
                                           pad_token_id(loaded.tokenizer))
    assert error <= TOLERANCE[dtype], f"smollm2 {dtype}: {error:.2e}"
    assert departure > 0.5


def test_gemma3_with_its_sliding_window_acting(tmp_path):
    """Gemma 3 270M (QK-norm, 4 query heads over 1 key-value head, a 512-token window on 5 layers of every 6): a
    passage of 30 corpus lines, longer than the window, beside 5 sentences. The gate checks the window where it
    acts, the stored vectors reproduce the model's eager attention, and a logit splits exactly (qkviz explain)."""
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
    passage = " ".join(lines[:30])
    run = qkviz.extract("gemma3", lines[40:45] + [passage], tmp_path / "gemma3", progress=False)
    assert (run.n_layers, run.n_heads, run.n_kv_heads, run.head_dim) == (18, 4, 1, 256)
    assert run.is_causal and run.family == "gemma3_text" and [run.kv_head(h) for h in range(4)] == [0] * 4
    assert run.scale(0) == pytest.approx(256 ** -0.5)                     # query_pre_attn_scalar
    assert [run.sliding_window(layer) for layer in range(18)] == ([512] * 5 + [None]) * 3
    gate = run.manifest["extraction"]["exactness_gate"]
    assert gate["window"] == {**gate["window"], "span": 512, "exercised": True}, gate
    assert gate["max_error"] <= gate["bound"]
    long = run.n_sentences - 1
    n = len(range(run.n_tokens)[run.sentence_tokens(long)])
    assert n > 512 + 32
    sliding, full = run.attention(0, 1, long), run.attention(5, 1, long)
    assert not sliding[-1, :n - 512].any() and sliding[-1, n - 512:].sum() == pytest.approx(1)
    assert full[-1, :n - 512].sum() > 1e-3                               # the global layer sees past the window
    loaded = load_model("gemma3")
    error, departure = max_attention_error(run, model_directory("gemma3")[0], [0, 2, long],
                                           pad_token_id(loaded.tokenizer))
    assert error <= TOLERANCE["float32"], f"gemma3: {error:.2e}"
    assert departure > 0.5
    query = run.sentence_tokens(long).stop - 1
    for layer, key in ((4, query - 3), (17, run.sentence_tokens(long).start + 1)):   # inside / past the window
        frame = run.explain(layer, 2, query=query, key=key, model=loaded.model)
        logit = run.scale(layer) * float(run.queries(layer, 2)[query].astype(np.float64) @ run.keys(layer, 2)[key])
        assert frame.contribution.sum() == pytest.approx(frame.attrs["logit"], abs=1e-5)
        assert frame.attrs["logit"] == pytest.approx(logit, abs=1e-4)


def test_real_minilm_head_layouts_are_trustworthy(minilm_run):
    # moved from tests/unit/projection/test_projectors.py: it needs the real bundled MiniLM (shared with test_report.py)
    from qkviz.core.alignment import align_head
    from qkviz.projection import project_points as project
    from sklearn.manifold import trustworthiness

    run = minilm_run
    points = align_head(run.queries(2, 5), run.keys(2, 5)).points
    for method in ("tsne", "umap"):
        coordinates = project(points, method, 2, seed=0).coordinates
        assert trustworthiness(points, coordinates, n_neighbors=10) >= 0.9, method
