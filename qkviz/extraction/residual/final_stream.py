"""The whole model's direct effect at one token: the final residual stream split into the parts that wrote it, each
through the final norm with its divisor fixed and then the unembedding, so that the target's logit is a sum over
parts (the direct logit attribution of the IOI and induction-head papers, made exact and checked).

One pass of the sequence (:class:`FinalTrace`) runs to the end instead of stopping at a layer, and keeps, at the
traced token, the final norm's input and output, what enters the unembedding and what leaves it, and the model's own
logits (where the query is the only traced token and the model takes ``logits_to_keep``, it makes the query's logits
only: no other position's are read). The parts of the last layer's output are
:class:`~qkviz.extraction.residual.residual_stream.ResidualStream`'s, every layer checked as there; the final norm
is frozen as every norm is (its bias a part of its own), and each step is checked against the model's own numbers:
the normed parts add up to the unembedding's input, their logits (and the unembedding's bias, a part
``unembed.bias``) to its output. What the model does to its logits after the unembedding
is kept apart: a scale (Cohere's, Granite's) multiplies every part, and a soft cap (Gemma 2's), which no sum of parts
survives, leaves the parts adding up to the logit before the cap, both logits given. Anything else is refused in one
line.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import numpy as np
import torch

from qkviz.core.errors import QkvizError
from qkviz.extraction.residual.frozen_norm import FrozenNorm, is_norm
from qkviz.extraction.residual.residual_pass import AttributionRefused
from qkviz.extraction.residual.residual_parts import ResidualTrace, traced
from qkviz.extraction.residual.residual_stream import StreamParts, matches

#: the part that is the unembedding's own bias
UNEMBED_BIAS = "unembed.bias"


@dataclass
class DirectEffects:
    """The target logit at one token split by part: ``contributions[p]`` for ``names[p]`` (float64), adding up to
    ``logit`` (the model's own, after any scale; where the model caps its final logits, the logit before the cap,
    and ``capped`` the logit after it). ``vectors[p]`` is each part of the final residual stream (before the final
    norm) and ``readout`` the direction they are read along: the target's unembedding row back through the frozen
    final norm, times any scale, so that ``vectors @ readout`` are the contributions of every part but the biases
    added after the last layer (the final norm's and the unembedding's, which ``fixed`` holds by name)."""

    names: list[str]
    contributions: np.ndarray
    logit: float
    capped: float | None
    vectors: np.ndarray
    readout: np.ndarray
    fixed: dict[str, float]


class FinalTrace(ResidualTrace):
    """A whole pass of one sequence keeping what follows the last layer at the traced tokens; the logit split is the
    last traced token's (the query)."""

    def _end_hooks(self, attention_modules: list, started: list) -> list:
        model = self.model
        self.unembedding = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if self.unembedding is None or not isinstance(getattr(self.unembedding, "weight", None), torch.Tensor):
            raise AttributionRefused(f"{self.adapter.family}: the model has no unembedding (a language-model head), "
                                     "so no token's logit can be split")
        self.final_norms: list[tuple[str, torch.Tensor, torch.Tensor, torch.nn.Module]] = []
        self.unembed_in = self.unembed_out = self.logits = None
        inside = {id(module) for layer in self.layers for module in layer.modules()}

        def norm_hook(name):
            def hook(module, inputs, output):
                if started[0] and (out := self._at(output)) is not None:
                    self.final_norms.append((name, self._at(inputs[0]), out, module))
            return hook

        last_only = self._last_logits_only()

        def at(tensor):
            """``tensor`` at the traced tokens; where the model makes its last position's logits only, that one."""
            if last_only and isinstance(tensor, torch.Tensor) and tensor.ndim == 3 and tuple(tensor.shape[:2]) == (1, 1):
                return tensor[0].detach().clone()
            return self._at(tensor)

        def keep_unembedding(_module, inputs, output):
            self.unembed_in, self.unembed_out = at(inputs[0]), at(output)

        def keep_logits(_module, _inputs, output):
            logits = getattr(output, "logits", None)
            self.logits = None if logits is None else at(logits)

        base = getattr(model, "base_model", model)        # a norm is named as in the base model, as the layers' are
        hooks = [module.register_forward_hook(norm_hook(name)) for name, module in base.named_modules()
                 if id(module) not in inside and is_norm(module)]
        hooks.append(self.unembedding.register_forward_hook(keep_unembedding))
        hooks.append(model.register_forward_hook(keep_logits))
        if last_only:
            hooks.append(model.register_forward_pre_hook(
                lambda _module, args, kwargs: (args, {**kwargs, "logits_to_keep": 1}), with_kwargs=True))
        return hooks

    def _last_logits_only(self) -> bool:
        """Whether the pass asks the model for its last position's logits only (``logits_to_keep=1``): where the one
        traced token is the sequence's last (a query's split, which never reads another position's logits) and the
        model's forward takes the option. The unembedding of every other position, a fifth of a small model's pass
        with a large vocabulary (SmolLM2's), is then never made."""
        return (len(self.tokens) == 1 and int(self.tokens[0]) == self.length - 1
                and _takes_logits_to_keep(type(self.model).forward))

    def final_parts(self) -> tuple[StreamParts, FrozenNorm | None, str | None]:
        """``(parts, norm, name)``: the parts of the last layer's output, and the final norm (divisor fixed) that
        takes their sum to the unembedding's own input, with its name (None, None where nothing stands between).
        Worked out once per trace."""
        if getattr(self, "_final", None) is None:
            self._final = self._final_parts()
        return self._final

    def _final_parts(self) -> tuple[StreamParts, FrozenNorm | None, str | None]:
        last = self.last_layer
        stream = self._through_layer(last, self.parts_entering(last))
        if self.unembed_in is None:
            raise self._refuse("its unembedding was not called on the traced token")
        target = self.unembed_in.double()
        if matches(stream.total(), target):
            return stream, None, None
        for name, real_in, real_out, module in self.final_norms:
            if real_in is not None and matches(stream.total(), real_in.double()) and matches(real_out.double(), target):
                return stream, self._frozen(name, real_in, real_out, module), name
        raise self._refuse("what enters its unembedding is not its last layer's output through one norm")

    def direct_effects(self, target: int, at: int = -1) -> DirectEffects:
        """The logit of token id ``target`` at traced token ``at`` (an index of the traced tokens; the last, the
        query, by default), split by part (:class:`DirectEffects`). A trace of a causal model's whole sequence holds
        every earlier token's split as a trace up to that token would (to float32 rounding)."""
        parts, norm, norm_name = self.final_parts()
        weight = self.unembedding.weight.detach()           # only the target's row is made float64, not the vocabulary
        if not 0 <= target < weight.shape[0]:
            raise QkvizError(f"target {target} is outside the model's vocabulary of {weight.shape[0]} tokens")
        target_row = weight[target].double()
        row = target_row[None].expand(len(self.tokens), -1)
        readout = (row if norm is None else norm.transposed(row))[at]                    # [width], at the token
        vectors = torch.stack([vector[at] for vector in parts.vectors])                  # [part, width]
        names, contributions = list(parts.names), list((vectors @ readout).numpy())
        fixed = {}
        if norm is not None and norm.bias is not None:
            fixed[f"{norm_name}.bias"] = float(norm.bias @ target_row)
        bias = getattr(self.unembedding, "bias", None)
        if isinstance(bias, torch.Tensor):
            fixed[UNEMBED_BIAS] = float(bias.detach()[target].double())
        names += list(fixed)
        contributions += list(fixed.values())
        unembedded = self.unembed_out[at].double()
        if abs(sum(contributions) - float(unembedded[target])) > 1e-4 * max(1.0, float(unembedded.abs().max())):
            raise self._refuse("its parts' logits do not add up to its unembedding's output")
        scale, cap = self.after_unembedding()
        contributions = np.array(contributions) * scale
        logit = float(contributions.sum())
        capped = None if cap is None else float(cap * np.tanh(logit / cap))
        return DirectEffects(names, contributions, logit, capped, vectors.numpy(), readout.numpy() * scale,
                             {name: value * scale for name, value in fixed.items()})

    def after_unembedding(self) -> tuple[float, float | None]:
        """``(scale, cap)``: what the model does to the unembedding's output at the query, checked over its whole
        vocabulary (worked out once per trace)."""
        if getattr(self, "_after", None) is None:
            self._after = self._after_unembedding(self.unembed_out.double()[-1])
        return self._after

    def _after_unembedding(self, unembedded: torch.Tensor) -> tuple[float, float | None]:
        if self.logits is None:
            raise self._refuse("its output holds no logits")
        final = self.logits.double()[-1]
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap and matches(cap * torch.tanh(unembedded / cap), final):
            return 1.0, float(cap)
        if matches(final, unembedded):
            return 1.0, None
        scale = float(final @ unembedded / (unembedded @ unembedded))
        if matches(scale * unembedded, final):
            return scale, None
        raise self._refuse("its final logits are not its unembedding's output, scaled or capped")


@functools.lru_cache(maxsize=64)
def _takes_logits_to_keep(forward) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def direct_effect_parts(model: torch.nn.Module, token_ids, position: int, target: int) -> DirectEffects:
    """The logit of token id ``target`` at ``position`` of the sequence ``token_ids`` (positions after it are not
    passed: a causal model's logit there does not read them), split by the parts of the final residual stream
    (:class:`DirectEffects`); a family whose split is not exact is refused in one line (:class:`AttributionRefused`)."""
    return traced(model, np.asarray(token_ids)[:position + 1], [position], None, FinalTrace).direct_effects(int(target))
