"""The exactness gate: before a run is written, its first batch proves that qkviz reproduces the model's attention.

Two forward passes over the same small batch (the first sentences, cut to :data:`GATE_TOKENS` tokens, padded,
so the padding mask is part of the test): one with qkviz's capture (:mod:`qkviz.extraction.capture`), which
gives every layer's queries, keys and settings; one with the model's own eager attention, whose probabilities
are read from every attention module's output. The probabilities recomputed from the captured queries and
keys by :func:`qkviz.core.attention.attention_probs` (the function every view, statistic and report uses)
must match the model's to within :func:`tolerance`. Otherwise the run is refused in one line that names the
family, the error and where it is largest, and nothing is written: a family never seen before is then either
exact or refused, never silently wrong.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from qkviz.core.attention import attention_probs
from qkviz.core.errors import QkvizError
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture import AttentionRecorder, LayerAttentionSettings, LayerCalls, capturing, switch_attention

logger = logging.getLogger(__name__)

#: tokens of each gate sentence: more than a tiny model's test window, few enough to cost one short pass
GATE_TOKENS = 40
GATE_SENTENCES = 2


@dataclass(frozen=True)
class GateResult:
    """What the gate measured: each layer's settings, the largest error and where it is."""

    settings: dict[int, LayerAttentionSettings]
    max_error: float
    layer: int
    head: int

    def as_manifest(self) -> dict:
        return {"max_error": self.max_error, "layer": self.layer, "head": self.head}


def tolerance(dtype: torch.dtype) -> float:
    """The largest difference accepted between recomputed and model probabilities. The two passes differ only by
    rounding, which grows with depth (float32: 1e-7 on two layers, 7e-6 on SmolLM2's 30, 1e-4 on a random
    32-layer model); a term left out or a mask not reproduced moves a probability over 40 keys by about 1/40."""
    return 1e-3 if dtype in (torch.float32, torch.float64) else 3e-2


def check_exactness(model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape,
                    layer_of_module: LayerCalls, inputs: dict[str, torch.Tensor], lengths: list[int],
                    expected_causal: bool | None = None) -> GateResult:
    """Compare the attention recomputed from what qkviz captures on ``inputs`` (one batch whose row ``b`` has
    ``lengths[b]`` real tokens first) with the model's own eager attention; raise a one-line
    :class:`QkvizError` if they differ."""
    captured, settings = _captured(model, layer_of_module, inputs, shape, adapter.family)
    theirs = _eager_probabilities(model, adapter, inputs)
    dtype = next(model.parameters()).dtype
    worst = (0.0, 0, 0)
    for layer in range(shape.n_layers):
        queries, keys = captured[layer]
        setting = settings[layer]
        for row, n in enumerate(lengths):
            for head in range(shape.n_heads):
                ours = attention_probs(queries[row, head, :n], keys[row, shape.kv_head_of(head), :n], setting.scale,
                                       setting.causal, setting.sliding_window, setting.softcap)
                error = float(np.abs(ours - theirs[layer][row, head, :n, :n]).max())
                if not error <= worst[0]:
                    worst = (error, layer, head)
    result = GateResult(settings, *worst)
    if not result.max_error <= tolerance(dtype):
        raise QkvizError(
            f"{adapter.family}: refused: attention recomputed from the captured queries and keys differs from the "
            f"model's own by {result.max_error:.2g} (layer {result.layer}, head {result.head}; at most "
            f"{tolerance(dtype):g} is exact), so the model adds something q.k cannot express (a position bias, sink "
            "logits, a mask qkviz does not reproduce); nothing was written")
    if expected_causal is not None and any(s.causal != expected_causal for s in settings.values()):
        raise QkvizError(f"{adapter.family}: layers disagree with the family's causality; nothing was written")
    logger.info("exactness gate: %s attention recomputed to within %.1e of the model's own (%d layers)",
                adapter.family, result.max_error, shape.n_layers)
    return result


def _captured(model, layer_of_module: LayerCalls, inputs: dict, shape: ModelShape, family: str
              ) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], dict[int, LayerAttentionSettings]]:
    """Every layer's ``(queries [batch, head, pos, d], keys [batch, kv_head, pos, d])`` float64 and settings."""
    seen: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def keep(layer, queries, keys, value_norms):
        seen[layer] = (queries.double().cpu().numpy(), keys.double().cpu().numpy())

    recorder = AttentionRecorder(layer_of_module, keep)
    with torch.inference_mode(), capturing(model, recorder):
        model(**inputs)
    expected = ((shape.n_heads, shape.head_dim), (shape.n_kv_heads, shape.head_dim))
    shapes = {layer: (q.shape[1::2], k.shape[1::2]) for layer, (q, k) in seen.items()}
    if sorted(seen) != list(range(shape.n_layers)) or any(v != expected for v in shapes.values()):
        raise QkvizError(f"{family}: captured (heads, d_head) per layer {shapes} do not match the model's {shape}")
    return seen, dict(recorder.settings)


def _eager_probabilities(model, adapter: FamilyAdapter, inputs: dict) -> list[np.ndarray]:
    """The model's own attention probabilities ``[batch, head, query, key]`` per attention layer, from its eager
    implementation (each attention module returns them beside its output)."""
    modules = adapter.attention_modules(model)
    layer_of = LayerCalls(modules).counter()
    weights: dict[int, torch.Tensor] = {}

    def keep(module, _args, output):
        layer = layer_of(module)
        probabilities = _probabilities_in(output)
        if probabilities is not None:
            weights[layer] = probabilities.detach()

    previous = model.config._attn_implementation
    switch_attention(model, "eager")
    handles = [module.register_forward_hook(keep) for module in {id(module): module for module in modules}.values()]
    try:
        with torch.inference_mode():
            model(**inputs, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
        switch_attention(model, previous)
    if sorted(weights) != list(range(len(modules))):
        raise QkvizError(f"{adapter.family}: its eager attention returns no probabilities for layers "
                         f"{sorted(set(range(len(modules))) - set(weights))}, so qkviz cannot check it; nothing was "
                         "written")
    return [weights[layer].double().cpu().numpy() for layer in range(len(modules))]


def _probabilities_in(output) -> torch.Tensor | None:
    """The attention probabilities ``[batch, head, query, key]`` an attention module returns beside its output: its
    second result (the attention interface's modules), or, from families with their own attention code, the first
    4-dimensional tensor after the output in what it returns (a list, or tuples in tuples: I-BERT's scaling factors,
    LUKE's entity states)."""
    if not isinstance(output, (tuple, list)) or len(output) < 2:
        return None
    if isinstance(output[1], torch.Tensor):
        return output[1]
    pending = list(output[1:]) if not isinstance(output[0], (tuple, list)) else [*output[0][1:], *output[1:]]
    while pending:
        item = pending.pop(0)
        if isinstance(item, torch.Tensor) and item.dim() == 4:
            return item
        if isinstance(item, (tuple, list)):
            pending[:0] = list(item)
    return None
