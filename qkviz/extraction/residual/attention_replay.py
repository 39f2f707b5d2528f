"""One layer's attention module called again, on other rows than the model's own, at the traced tokens.

The residual-stream split (:mod:`qkviz.extraction.residual.residual_parts`) needs each part's query and key as the layer's own
attention module makes them: the same projections, QK-norm, rotation and biases, at each token's own position. The
module is called with what the model's pass gave it (positions, rotary tables, masks, ALiBi tables), taken at the
traced tokens and repeated for the rows of the parts' batch, with every norm inside it fixed at the divisor it had for
each token (:mod:`qkviz.extraction.residual.frozen_norm`). The call stops where the queries and keys meet (the attention and
output projection of the parts are never needed).
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from qkviz.extraction.capture.recorder import capturing
from qkviz.extraction.residual.frozen_norm import FrozenNorm


class PassDone(Exception):
    """Raised once a pass has given what is read of it: the rest of the model's code is not run."""


class AttentionReplay:
    """Layer ``attention`` module's call of the model's pass (``args``, ``kwargs``; its inner norms' real inputs and
    outputs), replayed on other rows at ``tokens`` of a sequence of ``length`` positions. ``refuse(what)`` makes the
    one-line refusal; ``frozen(name, real_in, real_out, module)`` a norm's fixed form."""

    def __init__(self, model: torch.nn.Module, attention: torch.nn.Module, attention_path: str, args: tuple,
                 kwargs: dict, inner_norms: dict, tokens: torch.Tensor, length: int,
                 refuse: Callable[[str], Exception], frozen: Callable[..., FrozenNorm]):
        self.model, self.attention, self.attention_path = model, attention, attention_path
        self.args, self.kwargs, self.inner_norms = args, kwargs, inner_norms
        self.tokens, self.length = tokens, length
        self.refuse, self.frozen = refuse, frozen

    def run(self, rows: torch.Tensor, layer: int, keep_graph: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The queries ``[row, head, token, d]`` and keys of ``rows`` ``[row, token, width]`` (float64) as the
        module makes them at the traced tokens' positions (``keep_graph``: as the module's dtype, differentiable
        with respect to ``rows``)."""
        kept = self._kept(rows, layer, keep_graph)
        return kept["query"], kept["key"]

    def made(self, rows: torch.Tensor, layer: int, keep_graph: bool = False) -> dict[str, torch.Tensor]:
        """The queries ``[row, head, token, d]``, keys and values ``[row, kv_head, token, d]`` of ``rows`` (as
        :meth:`run`), under the names ``query``, ``key`` and ``value``."""
        return self._kept(rows, layer, keep_graph)

    def values(self, rows: torch.Tensor, layer: int) -> torch.Tensor:
        """The values ``[row, kv_head, token, d]`` (float64) the module makes of ``rows`` ``[row, token, width]``."""
        return self._kept(rows, layer, False)["value"]

    def _kept(self, rows: torch.Tensor, layer: int, keep_graph: bool) -> dict[str, torch.Tensor]:
        attention = self.attention
        dtype = next(attention.parameters()).dtype
        hidden = rows.to(dtype)
        args, kwargs = self.args, dict(self.kwargs)
        kwargs = {name: self._for_rows(name, self._sliced(name, value), len(rows)) for name, value in kwargs.items()
                  if name != "hidden_states"}
        if args:
            args = (hidden, *(self._for_rows(f"argument {i + 1}", self._sliced(f"argument {i + 1}", value), len(rows))
                              for i, value in enumerate(args[1:], 0)))
        else:
            kwargs["hidden_states"] = hidden
        kept: dict[str, torch.Tensor] = {}

        class Keeper:            # the recorder's interface, keeping the graph (AttentionRecorder detaches)
            def record(self, _module, query, key, value, _scaling, _kwargs):
                kept["query"], kept["key"] = (query, key) if keep_graph else (query.detach().double(),
                                                                               key.detach().double())
                kept["value"] = value if keep_graph else value.detach().double()
                raise PassDone        # the parts' attention and output projection are never needed

        grad = torch.enable_grad() if keep_graph else torch.inference_mode()
        with grad, capturing(self.model, Keeper()), self._fixed_inner_norms():
            try:
                attention(*args, **kwargs)
            except PassDone:
                pass
        if "query" not in kept:
            raise self.refuse(f"layer {layer}'s attention module, called on the parts, did not compute queries")
        return kept

    def _sliced(self, name: str, value):
        """A keyword the attention module was called with, at the traced tokens (positions, masks, rotary tables,
        ALiBi tables)."""
        if isinstance(value, (tuple, list)):
            return type(value)(self._sliced(name, item) for item in value)
        if not isinstance(value, torch.Tensor) or self.length == 1 or self.length not in value.shape:
            return value
        tokens = self.tokens.to(value.device)
        if name in ("attention_mask", "argument 1") and value.ndim == 4:
            return value[..., tokens, :][..., tokens]
        if name in ("position_ids", "cache_position"):
            return value[..., tokens]
        if name == "position_embeddings" and value.shape[-2] == self.length:
            return value[..., tokens, :]
        if name == "alibi" and value.ndim == 3 and value.shape[-1] == self.length:
            return value[..., tokens]
        # anything else passes as it is: a sequence-shaped input the module needs for its queries and keys would make
        # them differ from the model's own, which query_key_parts checks
        return value

    def _for_rows(self, name: str, value, rows: int):
        """A mask or ALiBi table of the batch of one, repeated for the ``rows`` of the parts' batch (families that
        check its batch size)."""
        if not isinstance(value, torch.Tensor):
            return value
        if name in ("attention_mask", "argument 1") and value.ndim == 4 and value.shape[0] == 1:
            return value.expand(rows, *value.shape[1:])
        if name == "alibi" and value.ndim == 3:          # BLOOM: [batch x heads, 1, keys]
            return value.repeat(rows, 1, 1)
        return value

    @contextlib.contextmanager
    def _fixed_inner_norms(self):
        """Every norm inside the attention module (QK-norm) replaced by its form with the divisor of each traced
        token, as the real pass computed it (the position axis found from the shape the parts arrive in)."""
        attention, prefix = self.attention, self.attention_path
        hooks = []
        for name, (real_in, real_out) in self.inner_norms.items():
            relative = name[len(prefix) + 1:] if prefix and name.startswith(prefix + ".") else name
            module = attention.get_submodule(relative) if relative else attention
            hooks.append(module.register_forward_hook(self._frozen_hook(name, module, real_in, real_out)))
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def _frozen_hook(self, name: str, module: torch.nn.Module, real_in: torch.Tensor, real_out: torch.Tensor):
        frozen: dict[tuple, FrozenNorm] = {}

        def hook(_module, inputs, _out):
            parts = inputs[0]
            key = tuple(parts.shape[1:])
            if key not in frozen:
                axis = self._token_axis(real_in, parts)
                if axis is None:
                    real_in_at, real_out_at = real_in, real_out
                else:
                    tokens = self.tokens.to(real_in.device)
                    real_in_at, real_out_at = real_in.index_select(axis, tokens), real_out.index_select(axis, tokens)
                frozen[key] = self.frozen(name, real_in_at, real_out_at, module)
            return frozen[key].affine(parts).to(parts.dtype)
        return hook

    def _token_axis(self, real: torch.Tensor, parts: torch.Tensor) -> int | None:
        """The axis of ``real`` (the norm's input in the real pass, ``[1, ...]``) that holds positions, where the
        parts (``[rows, ...]``, the traced tokens in its place) differ from it; None where they are all the tokens
        in order (nothing to select)."""
        if real.shape[0] != 1 or real.ndim != parts.ndim:
            raise self.refuse("a norm inside its attention sees inputs of another shape for the parts")
        if torch.equal(self.tokens, torch.arange(self.length)) and real.shape[1:] == parts.shape[1:]:
            return None
        axes = [axis for axis in range(1, real.ndim - 1)
                if real.shape[axis] == self.length and parts.shape[axis] == len(self.tokens)
                and all(real.shape[other] == parts.shape[other] for other in range(1, real.ndim) if other != axis)]
        if len(axes) != 1:
            raise self.refuse("a norm inside its attention has no single position axis")
        return axes[0]

