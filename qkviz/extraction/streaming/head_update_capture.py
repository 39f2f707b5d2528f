"""A head's update to the hidden state, per token (attention-focus plots, Figs. 7-9), captured at
extraction with ``--head-update`` (torch).

A head's update is its output through its slice of the attention's output projection,
``u_h = o_h W_O[h]`` (``o_h`` the head's part of what enters the projection: its attention-weighted values,
after any output gate the family applies, ``[d_value]``; the shared
output bias and any post-attention norm left out), and the hidden state is the layer's input
``x``, the residual stream the update is added to. Per token and head the run keeps
``|u_h| / |x|`` and ``cos(u_h, x)``.
"""

from __future__ import annotations

import torch

from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture.recorder import LayerCalls


class HeadUpdateProbe:
    """Keeps each layer's input and turns what enters each layer's attention output projection (every head's
    output side by side, after any gate the family applies) into (ratio, cosine) per head and token.

    A context manager: while it lasts, ``sink(layer, updates [batch, head, pos, 2])`` receives each layer's
    results as the model runs."""

    def __init__(self, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, sink):
        self._slices = adapter.output_head_slices(model, shape)
        self._layers = adapter.layer_modules(model)
        self._projections = adapter.output_projections(model)
        self._heads = shape.n_heads
        self._inputs: dict[int, torch.Tensor] = {}
        self._sink = sink
        self._handles = []

    def __enter__(self) -> "HeadUpdateProbe":
        # one hook per module, the layer from the call order: a shared layer (ALBERT) is every layer in turn
        layer_of_input, layer_of_output = LayerCalls(self._layers).counter(), LayerCalls(self._projections).counter()
        for module in _distinct(self._layers):
            self._handles.append(module.register_forward_pre_hook(self._keeper(layer_of_input), with_kwargs=True))
        for projection in _distinct(self._projections):
            self._handles.append(projection.register_forward_pre_hook(self._updater(layer_of_output)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._inputs.clear()

    def _keeper(self, layer_of):
        def keep(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            self._inputs[layer_of(module)] = hidden.detach()
        return keep

    def _updater(self, layer_of):
        def update(projection, args):
            heads = args[0].detach()                                          # [batch, pos, heads x d_value]
            self(layer_of(projection), heads.reshape(*heads.shape[:-1], self._heads, -1))
        return update

    def __call__(self, layer: int, outputs: torch.Tensor) -> None:
        """``outputs`` ``[batch, pos, head, d_value]``: every head's output as the output projection receives it."""
        hidden = self._inputs.pop(layer).float()                              # [batch, pos, d_model]
        slices = self._slices[layer].to(hidden.device)
        updates = torch.einsum("bphd,hdm->bhpm", outputs.float(), slices)       # [batch, head, pos, d_model]
        hidden_norm = hidden.norm(dim=-1)[:, None]                            # [batch, 1, pos]
        update_norm = updates.norm(dim=-1)
        ratio = update_norm / hidden_norm.clamp_min(1e-12)
        cosine = (updates * hidden[:, None]).sum(-1) / (update_norm * hidden_norm).clamp_min(1e-12)
        self._sink(layer, torch.stack([ratio, cosine], dim=-1))


def _distinct(modules: list[torch.nn.Module]) -> list[torch.nn.Module]:
    return list({id(module): module for module in modules}.values())
