"""A head's update to the hidden state, per token (attention-focus plots, Figs. 7-9), captured at
extraction with ``--head-update`` (torch).

A head's update is its output through its slice of the attention's output projection,
``u_h = o_h W_O[h]`` (``o_h`` the attention-weighted values of the head, ``[d_head]``; the shared
output bias and any post-attention norm left out), and the hidden state is the layer's input
``x``, the residual stream the update is added to. Per token and head the run keeps
``|u_h| / |x|`` and ``cos(u_h, x)``.
"""

from __future__ import annotations

import torch

from qkviz.extraction.adapters import FamilyAdapter, ModelShape


class HeadUpdateProbe:
    """Keeps each layer's input and turns each layer's head outputs into (ratio, cosine) per token.

    Use as the recorder's ``output_sink``; ``sink(layer, updates [batch, head, pos, 2])`` receives
    the results."""

    def __init__(self, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, sink):
        self._slices = adapter.output_head_slices(model, shape)
        self._layers = adapter.layer_modules(model)
        self._inputs: dict[int, torch.Tensor] = {}
        self._sink = sink
        self._handles = []

    def __enter__(self) -> "HeadUpdateProbe":
        for layer, module in enumerate(self._layers):
            self._handles.append(module.register_forward_pre_hook(self._keeper(layer), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._inputs.clear()

    def _keeper(self, layer: int):
        def keep(_module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            self._inputs[layer] = hidden.detach()
        return keep

    def __call__(self, layer: int, outputs: torch.Tensor) -> None:
        hidden = self._inputs.pop(layer).float()                              # [batch, pos, d_model]
        slices = self._slices[layer].to(hidden.device)
        updates = torch.einsum("bphd,hdm->bhpm", outputs.float(), slices)       # [batch, head, pos, d_model]
        hidden_norm = hidden.norm(dim=-1)[:, None]                            # [batch, 1, pos]
        update_norm = updates.norm(dim=-1)
        ratio = update_norm / hidden_norm.clamp_min(1e-12)
        cosine = (updates * hidden[:, None]).sum(-1) / (update_norm * hidden_norm).clamp_min(1e-12)
        self._sink(layer, torch.stack([ratio, cosine], dim=-1))
