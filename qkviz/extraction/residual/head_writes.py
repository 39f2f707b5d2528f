"""What one head writes at one token, split exactly: by the token it read each piece from (``source``: the attention
weight times that token's value, through the head's slice of the output projection), and by the parts of the residual
stream that wrote those values (V-composition: each part's value at every source token, through the layer's input
norm with each token's divisor fixed and the attention module's value projection). Both are read along the same
direction as the head's direct effect on a target's logit (:mod:`qkviz.extraction.residual.final_stream`): the
target's unembedding row back through the frozen final norm, and through the frozen norm on the attention's output
where the family has one, so that both splits add up to the head's row of the direct effects.

The attention weights are the model's own queries and keys of that pass through the head's logit rule (the one rule
every recomputation of qkviz uses, :func:`qkviz.core.attention.attention_probs`); every step is checked: the weighted
values add up to what enters the output projection, the value parts to the model's own values, and each split to the
head's row. One pass of a sequence serves every token of it (:func:`head_writes_at`): what the tokens share (the value
parts, the head's attention) is worked out once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from qkviz.core.attention import attention_probs
from qkviz.core.errors import QkvizError
from qkviz.core.logit_rule import LogitRule
from qkviz.extraction.residual.attention_replay import AttentionReplay
from qkviz.extraction.residual.final_stream import DirectEffects, FinalTrace
from qkviz.extraction.residual.frozen_norm import FrozenNorm
from qkviz.extraction.residual.residual_parts import traced
from qkviz.extraction.residual.residual_stream import matches


@dataclass
class HeadWrites:
    """Head ``(layer, head)``'s row of the direct effects (``row``, of ``effects``) split by source position
    (``attention[j]`` and ``by_source[j]`` for positions ``0..query``) and by the parts that wrote the values
    (``by_part[p]`` for ``part_names[p]``); ``logits``: the head's direct effect on every token of the vocabulary."""

    effects: DirectEffects
    row: float
    attention: np.ndarray
    by_source: np.ndarray
    part_names: list[str]
    by_part: np.ndarray
    logits: np.ndarray


class HeadTrace(FinalTrace):
    """A whole pass of one sequence traced at every position up to the query (the last traced token), keeping each
    layer's values."""

    def _once(self, key: tuple, make):
        """``make()``, worked out once per trace for ``key``: what every traced token of the pass shares (a layer's
        value parts, a head's attention, the float64 unembedding), so that reading many tokens of one trace pays for
        it once."""
        if getattr(self, "_shared", None) is None:
            self._shared: dict[tuple, object] = {}
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]

    def _post_norm(self, layer: int) -> FrozenNorm | None:
        """The norm on layer ``layer``'s attention output before the residual (Gemma's, OLMo 2's), divisor fixed."""
        return self._once(("post-norm", layer), lambda: self._find_post_norm(layer))

    def _find_post_norm(self, layer: int) -> FrozenNorm | None:
        record = self.records[layer]
        real_heads = record.heads_out.double()
        for name, (real_in, real_out) in record.norms.items():
            if real_in is not None and matches(real_heads, real_in.double()):
                return self._frozen(name, real_in.double(), real_out.double(), self._module(layer, name))
        return None

    def _value_readout(self, layer: int, head: int, readout: torch.Tensor, at: int) -> torch.Tensor:
        """The direction ``[d_value]`` a value of head ``(layer, head)`` is read along at traced token ``at``:
        ``readout`` (a direction of the final residual stream there) back through the post-norm and the head's
        output slice."""
        post = self._post_norm(layer)
        there = readout if post is None else post.transposed(readout[None].expand(len(self.tokens), -1))[at]
        return self._slices[layer][head].double() @ there

    def head_writes(self, layer: int, head: int, rule: LogitRule, target: int, at: int = -1) -> HeadWrites:
        """What head ``(layer, head)`` writes at traced token ``at`` (an index of the traced tokens, which are the
        positions ``0..`` of the sequence; the last, the query, by default), read along ``target``'s logit. A trace of
        a causal model's whole sequence holds every earlier token's writes as a trace up to it would (to float32
        rounding): the value parts, the same for every token, are worked out once per layer and key-value head."""
        at = range(len(self.tokens))[at]
        effects = self.direct_effects(target, at)
        row = float(effects.contributions[effects.names.index(f"L{layer}H{head}")])
        record, kv = self.records[layer], self.shape.kv_head_of(head)
        probabilities = self._once(("attention", layer, head), lambda: attention_probs(
            record.query[head].double().cpu().numpy(), record.key[kv].double().cpu().numpy(), rule))[at, :at + 1]
        values = self.values[layer][kv][:at + 1]                                                 # [token, d_value]
        weighted = torch.as_tensor(probabilities) @ values
        d_value = values.shape[-1]
        own = record.heads_in.double()[at, head * d_value:(head + 1) * d_value]
        if not matches(weighted, own):
            raise self._refuse(f"layer {layer} head {head}'s attention-weighted values are not what enters its "
                               "output projection")
        readout = torch.as_tensor(effects.readout)
        direction = self._value_readout(layer, head, readout, at)
        by_source = probabilities * (values @ direction).numpy()
        names, value_parts = self._value_parts(layer, kv)
        by_part = (value_parts[:, :at + 1] @ direction).numpy() @ probabilities                   # [part]
        for what, split in (("source", by_source), ("part", by_part)):
            if abs(float(split.sum()) - row) > 1e-4 * max(1.0, abs(effects.logit), abs(row)):
                raise self._refuse(f"layer {layer} head {head}'s split by {what} does not add up to its direct effect")
        return HeadWrites(effects, row, probabilities, by_source, names, by_part, self._head_logits(layer, head, at))

    def _value_parts(self, layer: int, kv: int) -> tuple[list[str], torch.Tensor]:
        """Each part's value of key-value head ``kv`` at every traced token ``[part, token, d_value]``, with the
        module's constant (``L{layer}.value_bias``), checked to add up to the model's own values; worked out once
        per trace, layer and key-value head."""
        return self._once(("value parts", layer, kv), lambda: self._split_values(layer, kv))

    def _split_values(self, layer: int, kv: int) -> tuple[list[str], torch.Tensor]:
        parts = self._attention_input_parts(layer, self.parts_entering(layer))
        rows = torch.stack(parts.vectors + [torch.zeros_like(parts.vectors[0])])
        record = self.records[layer]
        replay = AttentionReplay(self.model, self._attention_modules[layer], self.adapter.attention_path,
                                 record.attention_args, record.attention_kwargs, record.inner_norms, self.tokens,
                                 self.length, self._refuse, self._frozen)
        values = replay.values(rows, layer)[:, kv]                                     # [row, token, d_value]
        names, split = list(parts.names), values[:-1] - values[-1:]
        if float(values[-1].abs().max()) > 0:
            names.append(f"L{layer}.value_bias")
            split = torch.cat([split, values[-1:]])
        if not matches(split.sum(dim=0), self.values[layer][kv]):
            raise self._refuse(f"layer {layer}'s value parts do not add up to the model's own values")
        return names, split

    def _head_logits(self, layer: int, head: int, at: int) -> np.ndarray:
        """The head's direct effect on every token of the vocabulary at traced token ``at``: its vector in the final
        stream through the frozen final norm and the unembedding (times any scale; no bias: that is no head's)."""
        parts, norm, _name = self.final_parts()
        vector = parts.vectors[parts.names.index(f"L{layer}H{head}")]                  # [token, width]
        normed = (vector if norm is None else norm.linear(vector))[at:at + 1]
        scale = self.after_unembedding()[0]
        unembedding = self._once(("unembedding",), lambda: self.unembedding.weight.detach().double())
        return (unembedding @ normed[0]).numpy() * scale


def head_write_parts(model: torch.nn.Module, token_ids, position: int, target: int, layer: int, head: int,
                     rule: LogitRule) -> HeadWrites:
    """What head ``(layer, head)`` writes at ``position`` of the sequence ``token_ids`` (:class:`HeadWrites`), its
    attention weights through ``rule`` (the run's logit rule of the head); one pass of the positions up to it."""
    ids = np.asarray(token_ids)[:position + 1]
    return traced(model, ids, list(range(position + 1)), None, HeadTrace).head_writes(layer, head, rule, int(target))


def head_writes_at(model: torch.nn.Module, token_ids, positions, targets, layer: int, head: int,
                   rule: LogitRule) -> list[HeadWrites]:
    """:func:`head_write_parts` at each of ``positions`` of one sequence (``targets[i]`` the target at
    ``positions[i]``), from one pass of the positions up to the last of them: each position's writes are read from
    that pass (a causal model's pass up to a later token holds every earlier token's as a pass up to it would, to
    float32 rounding), and the value parts are split once."""
    positions = [int(position) for position in positions]
    if len(positions) != len(targets) or not positions:
        raise QkvizError("head_writes_at takes one target per position, and at least one position")
    last = max(positions)
    trace = traced(model, np.asarray(token_ids)[:last + 1], list(range(last + 1)), None, HeadTrace)
    return [trace.head_writes(layer, head, rule, int(target), at=position)
            for position, target in zip(positions, targets)]
