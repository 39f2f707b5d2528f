"""Capture each layer's queries and keys as they enter the attention dot product.

Hugging Face models call their attention through ``ALL_ATTENTION_FUNCTIONS`` with the query and
key states *after* bias, QK-norm and the rotary rotation and *before* the scale factor, shaped
``[batch, head, pos, d_head]`` (keys with the key-value heads only). We register one attention
implementation, :data:`CAPTURE_IMPLEMENTATION`, that hands those tensors to the active
:class:`AttentionRecorder` and then runs PyTorch's scaled-dot-product attention, so capturing
costs one extra copy and no fork of any model code.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

CAPTURE_IMPLEMENTATION = "qkviz_capture"
#: an attention that computes nothing (zeros), for passes that read only what enters attention (positions)
SKIP_IMPLEMENTATION = "qkviz_skip_attention"

#: ``sink(layer, queries, keys, value_norms)`` with tensors ``[batch, head, pos, d_head]``,
#: ``[batch, kv_head, pos, d_head]`` and ``[batch, kv_head, pos]``.
LayerSink = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class LayerAttentionSettings:
    """What a layer's attention applies beyond ``q . k``, as the model passed it."""

    scale: float
    causal: bool
    sliding_window: int | None
    softcap: float | None


class AttentionRecorder:
    """Receives every attention call of one model and forwards it to a sink, per layer."""

    def __init__(self, layer_of_module: dict[int, int], sink: LayerSink,
                 output_sink: Callable[[int, torch.Tensor], None] | None = None):
        self._layer_of_module = layer_of_module
        self._sink = sink
        self._output_sink = output_sink   # output_sink(layer, per-head outputs [batch, pos, head, d_head])
        self.settings: dict[int, LayerAttentionSettings] = {}

    def record(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
               value: torch.Tensor, scaling: float | None, kwargs: dict) -> None:
        layer = self._layer_of_module.get(id(module))
        if layer is None:
            raise RuntimeError(f"attention module {type(module).__name__} is not one of the mapped layers")
        scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
        window = kwargs.get("sliding_window")
        softcap = kwargs.get("softcap")
        self.settings[layer] = LayerAttentionSettings(
            scale=scale,
            causal=bool(getattr(module, "is_causal", False)),
            sliding_window=int(window) if window else None,
            softcap=float(softcap) if softcap else None,
        )
        self._sink(layer, query.detach(), key.detach(), value.detach().norm(dim=-1))

    def record_output(self, module: torch.nn.Module, output: torch.Tensor) -> None:
        if self._output_sink is not None:
            self._output_sink(self._layer_of_module[id(module)], output.detach())


_active_recorder: contextvars.ContextVar[AttentionRecorder | None] = contextvars.ContextVar(
    "qkviz_active_recorder", default=None)


def _capturing_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    recorder = _active_recorder.get()
    if recorder is not None:
        recorder.record(module, query, key, value, scaling, kwargs)
    output = ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask,
                                             scaling=scaling, dropout=dropout, **kwargs)
    if recorder is not None:
        recorder.record_output(module, output[0])
    return output


def _skipped_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    return torch.zeros_like(query).transpose(1, 2), None     # [batch, pos, head, d_head], as attention returns


AttentionInterface.register(CAPTURE_IMPLEMENTATION, _capturing_attention)
AttentionMaskInterface.register(CAPTURE_IMPLEMENTATION, sdpa_mask)
AttentionInterface.register(SKIP_IMPLEMENTATION, _skipped_attention)
AttentionMaskInterface.register(SKIP_IMPLEMENTATION, sdpa_mask)


@contextlib.contextmanager
def without_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model`` with every attention call returning zeros: a pass over thousands of positions that reads
    only their rotary tables or position embeddings costs no ``n x n`` attention."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(SKIP_IMPLEMENTATION)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


@contextlib.contextmanager
def capturing(model: torch.nn.Module, recorder: AttentionRecorder) -> Iterator[AttentionRecorder]:
    """Run ``model`` with ``recorder`` receiving every layer's queries and keys."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(CAPTURE_IMPLEMENTATION)
    token = _active_recorder.set(recorder)
    try:
        yield recorder
    finally:
        _active_recorder.reset(token)
        model.set_attn_implementation(previous)
