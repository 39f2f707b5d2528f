"""A circuit read chunk by chunk from few traced passes is the circuit read in one chunk from one pass.

``circuit_sums`` splits each sequence in chunks of ``CHUNK_TOKENS`` tokens and reads every chunk from one traced pass
per span of chunks (``qkviz.extraction.residual.chunked_sums``): the records of a pass taken at the chunk's positions.
With chunks of a few tokens and spans of two or three chunks (several passes per sequence, a causal model's ending
inside the sequence), every head's three sides must be those of a single chunk per sequence, on a causal rotary
model (Llama), a causal model with learned positions and biases (GPT-2) and a bidirectional post-norm encoder (BERT,
whose every pass is the whole sequence).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import qkviz
from qkviz.extraction.residual import chunked_sums
from support import CORPUS
from support.family_configs import tiny_family_model
from support.tiny_models import decoder_tokenizer

#: the module (``qkviz.explain.head_circuit`` the attribute is the function of that name)
circuits = importlib.import_module("qkviz.explain.head_circuit")
LINES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:8]


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "bert"])
def test_chunks_read_from_spans_of_one_pass_give_the_one_chunk_circuit(model_type, tmp_path, monkeypatch):
    model = tiny_family_model(model_type)
    run = qkviz.extract(model, LINES, tmp_path / "run", tokenizer=decoder_tokenizer(LINES), progress=False)
    heads = [(layer, head) for layer in range(run.n_layers) for head in range(run.n_heads)]
    sample = circuits.sample_sequences(run, 40, 1)
    whole = circuits.circuit_sums(run, model, heads, sample)
    longest = int(run.sentences.n_tokens.iloc[list(sample.sentences)].max())
    monkeypatch.setattr(circuits, "CHUNK_TOKENS", 4)
    width = int(model.get_input_embeddings().weight.shape[-1])
    per_token = chunked_sums.VECTORS_PER_TOKEN * width * 4 * run.n_layers
    monkeypatch.setattr(chunked_sums, "SPAN_BYTES", per_token * 10)          # spans of two chunks (8 tokens)
    assert chunked_sums.span_tokens(model, run.n_layers - 1) == 10 and longest > 2 * 8      # three spans or more
    chunked = circuits.circuit_sums(run, model, heads, sample)
    for key in heads:
        for side in ("query", "key", "value"):
            one, many = getattr(whole[key], side), getattr(chunked[key], side)
            assert getattr(whole[key], f"{side}_names") == getattr(chunked[key], f"{side}_names")
            size = max(float(np.abs(one).sum(axis=0).max()), 1e-6)
            assert np.abs(one - many).max() <= 1e-5 * size, (key, side, np.abs(one - many).max(), size)
        assert whole[key].logit == chunked[key].logit and whole[key].weight == chunked[key].weight


def test_spans_group_consecutive_chunks_within_the_tokens_given():
    chunks = [np.arange(start, min(start + 4, 18)) for start in range(0, 18, 4)]      # 0-3, 4-7, ..., 16-17
    assert chunked_sums.spans(chunks, 8) == [[0, 1], [2, 3], [4]]
    assert chunked_sums.spans(chunks, 3) == [[0], [1], [2], [3], [4]]                 # a chunk longer: its own span
    assert chunked_sums.spans(chunks, 100) == [[0, 1, 2, 3, 4]]
