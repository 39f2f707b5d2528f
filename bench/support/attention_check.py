"""The model's own attention, for comparison with attention recomputed from a run."""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModel

import qkviz


#: the last batch's attentions: the float32 and float16 tests of one model check the same sentences
_last: dict[tuple, tuple[torch.Tensor, ...]] = {}


def model_attentions(model_dir, token_ids: list[list[int]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Eager attention probabilities ``[layer][batch, head, query, key]`` for one right-padded batch
    (computed once for the same model and batch; the tensors are only read)."""
    key = (str(model_dir), tuple(map(tuple, token_ids)), pad_id)
    if key not in _last:
        _last.clear()
        _last[key] = _model_attentions(model_dir, token_ids, pad_id)
    return _last[key]


def _model_attentions(model_dir, token_ids: list[list[int]], pad_id: int) -> tuple[torch.Tensor, ...]:
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    width = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(token_ids):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        mask[row, :len(ids)] = 1
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=mask, output_attentions=True).attentions


def max_attention_error(run: qkviz.Run, model_dir, sentences: list[int], pad_id: int) -> tuple[float, float]:
    """Largest |recomputed - model| over every layer, head and listed sentence, in one padded batch;
    and the largest departure of the model's attention from uniform attention over the allowed keys
    (to show that the comparison is not between two near-uniform matrices)."""
    token_ids = [run.tokens.token_id.to_numpy()[run.sentence_tokens(s)].tolist() for s in sentences]
    attentions = model_attentions(model_dir, token_ids, pad_id)
    worst, departure = 0.0, 0.0
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            for row, sentence in enumerate(sentences):
                n = len(token_ids[row])
                ours = run.attention(layer, head, sentence)
                theirs = attentions[layer][row, head, :n, :n].double().numpy()
                worst = max(worst, float(np.abs(ours - theirs).max()))
                allowed = ours > 0
                uniform = allowed / allowed.sum(axis=1, keepdims=True)
                departure = max(departure, float(np.abs(theirs - uniform).max()))
    return worst, departure
