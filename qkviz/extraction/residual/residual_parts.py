"""The residual stream entering a layer, split into the parts that wrote it, and each part's query and key.

One forward pass of one sequence (:class:`ResidualTrace`) keeps, at the tokens asked for, what every layer reads and
writes: its input, what enters its attention's output projection (every head's output side by side), the
projection's output, every norm's input and output, and every sub-module output of the stream's width. From those:

* **the first layer's input** is the token embedding (``embed``), plus the position and token-type embeddings of
  absolute-position models (``position``, ``token_type``), through the embedding norm where there is one;
* **each layer** adds each head's output through its slice of the output projection (``L{l}H{h}``), the
  projection's bias (``L{l}.attn_bias``) and its MLP (``L{l}.mlp``: everything else the layer adds, checked to be
  the output of one of its own sub-modules). A norm on the attention's output (Gemma's and OLMo 2's post-norms)
  is applied to each head with its divisor fixed (:mod:`qkviz.extraction.residual.frozen_norm`); in a post-norm encoder
  (BERT), whose norms re-normalise the whole stream, every part is carried through each norm the same way. A norm's
  bias is a part of its own (``L{l}.<norm>.bias``).

At layer ``L`` the parts go through the layer's input norm (divisor fixed; its bias a part), then through the
layer's own attention module, once for all parts as one batch, with every norm inside it (QK-norm) fixed too, at
each token's own position (rotary families rotate each part where its token is). What the module adds to every
row alike (the projections' biases, the QK-norm's bias) is the part ``L{L}.query_bias`` or ``L{L}.key_bias``.

Every step is checked against the model's own numbers, at every traced token: the parts of each layer's input add
up to that input, the heads to the projection's output, the MLP part to a module's output, and the query and key
parts to the model's own query and key (and the value parts of a weighted sum to its own values). A family where one
does not hold is refused in one line (:class:`AttributionRefused`): the split is exact or it is not given.

The pass is :mod:`qkviz.extraction.residual.residual_pass`, the stream's parts layer by layer
:mod:`qkviz.extraction.residual.residual_stream`; this module gives their queries and keys (:class:`ResidualTrace`) and the
functions :mod:`qkviz.extraction` names.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import torch

from qkviz.core.errors import QkvizError
from qkviz.extraction.residual.attention_replay import AttentionReplay
from qkviz.extraction.residual.frozen_norm import FrozenNorm
from qkviz.extraction.residual.residual_pass import AttributionRefused
from qkviz.extraction.residual.residual_stream import MATCH_TOLERANCE, ResidualStream, StreamParts, matches


@dataclass
class QueryKeyParts:
    """The query and key of every head at the traced tokens, split by part: ``queries[p]`` ``[head, token, d_head]``
    for ``query_names[p]``, ``keys[p]`` ``[kv_head, token, d_head]`` for ``key_names[p]`` (float64); the model's own
    ``query`` and ``key`` they add up to."""

    query_names: list[str]
    queries: np.ndarray
    key_names: list[str]
    keys: np.ndarray
    query: np.ndarray
    key: np.ndarray


#: the sides a weighted sum may ask for, in the order of its rows
WEIGHTED_SIDES = ("query", "key", "value")


class ResidualTrace(ResidualStream):
    """One forward pass of one sequence (batch of one) keeping what splits every layer's input at ``tokens``
    (positions in the sequence); :meth:`parts_entering` and :meth:`query_key_parts` read it.

    ``model`` is the base model or one with a head (the adapter finds its layers); ``input_ids`` ``[1, positions]``."""

    def query_key_parts(self, layer: int, stream: StreamParts | None = None) -> QueryKeyParts:
        """Every part's query and key at ``layer``: the stream through the layer's input norm (divisor fixed), then
        through its attention module, all parts in one batch, with any norm inside it fixed as well."""
        stream = self.parts_entering(layer) if stream is None else stream
        record = self.records[layer]
        parts = self._attention_input_parts(layer, stream)
        rows = torch.stack(parts.vectors + [torch.zeros_like(parts.vectors[0])])      # the last row: no part
        queries, keys = self._through_attention(layer, rows)
        query_parts, key_parts = queries[:-1] - queries[-1:], keys[:-1] - keys[-1:]
        query_names, key_names = list(parts.names), list(parts.names)
        query_constant, key_constant = queries[-1], keys[-1]
        if float(query_constant.abs().max()) > 0:
            query_names.append(f"L{layer}.query_bias")
            query_parts = torch.cat([query_parts, query_constant[None]])
        if float(key_constant.abs().max()) > 0:
            key_names.append(f"L{layer}.key_bias")
            key_parts = torch.cat([key_parts, key_constant[None]])
        real_query, real_key = record.query.double(), record.key.double()
        if not matches(query_parts.sum(dim=0), real_query) or not matches(key_parts.sum(dim=0), real_key):
            raise self._refuse(f"layer {layer}'s query and key parts do not add up to the model's own query and key")
        return QueryKeyParts(query_names, query_parts.cpu().numpy(), key_names, key_parts.cpu().numpy(),
                             real_query.cpu().numpy(), real_key.cpu().numpy())

    def _value_sink(self):
        """Each traced layer's values at the traced tokens (``values[layer]`` ``[kv_head, token, d_value]``,
        float64): what the value side of a weighted sum is checked against."""
        self.values: dict[int, torch.Tensor] = {}

        def keep(layer: int, value: torch.Tensor) -> None:
            if layer <= self.last_layer:
                self.values[layer] = value[0][:, self.tokens.to(value.device)].double()   # [kv_head, token, d]
        return keep

    def weighted_sums(self, layer: int, stream: StreamParts, weights: dict[int, dict[str, np.ndarray]]) -> dict:
        """For each head ``h`` of ``weights`` (``{"query": [k, token, d_head], "key": [k, token, d_head]}``: ``k``
        weight vectors per side, one per traced token; optionally ``"value": [k, token]``, one number per token),
        every part's weighted sum: ``{h: {side: (names, [part, k])}}``.

        * ``query``, ``key``: ``sum_t w_t . q_{t,part}`` (and the same of the keys, of the head's key-value head);
        * ``value``: ``sum_t c_t (W_O^h v_{t,part}) . u_t``, ``u_t`` the unit vector of the model's own moved vector
          ``W_O^h v_t`` (the head's value through its slice of the output projection, before any norm on the
          attention's output): each part's projection on what the head moves from token ``t``, weighted by ``c_t``.
          The parts add up to ``sum_t c_t |W_O^h v_t|``.

        Each side is linear in the parts, so one backward pass through the layer's attention module gives, per head
        and weight, the vector of the stream each part is dotted with (``A^T w``, ``A`` the module's map with every
        norm fixed); no part's query, key or value is ever formed. The sums are checked against the model's own
        queries, keys and values (their sum over the parts, with the module's constant, must be ``sum_t w_t . q_t``,
        and the same of the keys and values)."""
        norm, norm_name = self._input_norm(layer, stream)
        vectors = {head: {side: (self._moved_weights(layer, head, asked) if side == "value" else asked)
                          for side, asked in weights[head].items()} for head in sorted(weights)}
        rows = [(head, side, index) for head in vectors for side in WEIGHTED_SIDES if side in vectors[head]
                for index in range(len(vectors[head][side]))]
        gradient, constants = self._weighted_backward(layer, stream, norm, rows, vectors)
        # each part's sum: the part (before the input norm) dotted with the gradient carried back through the norm
        before = gradient if norm is None else norm.transposed(gradient)
        flat = before.reshape(len(before), -1)
        values = torch.cat([block @ flat.T for block in self._part_blocks(stream.vectors)])     # [part, row]
        names = list(stream.names)
        if norm is not None and norm.bias is not None:
            values = torch.cat([values, (gradient * norm.bias).sum(dim=(1, 2))[None]])
            names.append(f"L{layer}.{norm_name}.bias")
        out = {}
        for head, sides in vectors.items():
            out[head] = {}
            for side, asked in sides.items():
                columns = [row for row, (h, s, _) in enumerate(rows) if h == head and s == side]
                constant = torch.tensor([constants[row] for row in columns], dtype=torch.float64)
                out[head][side] = self._checked_sums(layer, side, self._own(layer, side, head), asked, names,
                                                     values[:, columns], constant)
        return out

    def _own(self, layer: int, side: str, head: int) -> torch.Tensor:
        """The model's own queries ``[token, d]`` of ``head`` at ``layer`` (``side`` "query"), or the keys or values
        of its key-value head, float64."""
        record = self.records[layer]
        if side == "query":
            return record.query[head].double()
        return (record.key if side == "key" else self.values[layer])[self.shape.kv_head_of(head)].double()

    def _moved_weights(self, layer: int, head: int, received: np.ndarray) -> np.ndarray:
        """The value-side weights ``[k, token, d_value]`` of per-token numbers ``received`` ``[k, token]``:
        ``c_t W_O^h^T u_t``, ``u_t`` the unit vector of the moved vector ``W_O^h v_t`` (model's own value; zero
        where it is zero), so that a value ``v`` dotted with it is ``c_t (W_O^h v) . u_t``."""
        own = self._own(layer, "value", head)                                            # [token, d_value]
        output = self._slices[layer][head].double().to(own.device)                       # [d_value, width]
        moved = own @ output
        length = moved.norm(dim=-1, keepdim=True)
        unit = torch.where(length > 0, moved / length.clamp_min(1e-300), torch.zeros_like(moved))
        back = (unit @ output.T).cpu().numpy()                                           # [token, d_value]
        return np.asarray(received, dtype=np.float64)[..., None] * back[None]

    def _weighted_backward(self, layer: int, stream: StreamParts, norm: FrozenNorm | None, rows: list[tuple],
                           vectors: dict) -> tuple[torch.Tensor, list[float]]:
        """The gradient ``[row, token, width]`` of each row's weighted sum (``rows``: ``(head, side, index)``) with
        respect to the input of layer ``layer``'s attention module, and each row's constant (the module's output
        for a zero input, weighted). One backward pass: each row of the batch gets its weights as the output's
        gradient at its head (no per-row selection, whose backward would fill a whole output-sized tensor)."""
        parts = stream if norm is None else StreamParts(running=norm.linear(stream.total()))
        total = parts.total() if norm is None or norm.bias is None else parts.total() + norm.bias
        with torch.enable_grad():
            batch = torch.cat([total[None].expand(len(rows), -1, -1), torch.zeros_like(total)[None]])
            batch = batch.to(next(self._attention_modules[layer].parameters()).dtype).detach().requires_grad_(True)
            made = self._made_by_attention(layer, batch, keep_graph=True)
            cotangents = {side: torch.zeros_like(made[side]) for side in dict.fromkeys(side for _, side, _ in rows)}
            for row, (head, side, index) in enumerate(rows):
                cotangents[side][row, head if side == "query" else self.shape.kv_head_of(head)] = torch.as_tensor(
                    vectors[head][side][index], dtype=made[side].dtype, device=made[side].device)
            sides = list(cotangents)
            (gradient,) = torch.autograd.grad([made[side] for side in sides], batch,
                                              grad_outputs=[cotangents[side] for side in sides])
        constants = [float(made[side][-1, head if side == "query" else self.shape.kv_head_of(head)].detach().double()
                           .mul(torch.as_tensor(vectors[head][side][index], dtype=torch.float64,
                                                device=made[side].device)).sum())
                     for head, side, index in rows]
        return gradient[:-1].double(), constants

    @staticmethod
    def _part_blocks(vectors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The parts ``vectors`` as ``[part, token x width]`` blocks, in order, copying none that need not be: parts
        laid out one after another in one tensor (a layer's heads, made by one product) are a view of it; the parts
        between such runs are stacked."""
        def follows(before: torch.Tensor, vector: torch.Tensor) -> bool:
            return (before.is_contiguous() and vector.is_contiguous() and vector.shape == before.shape
                    and vector.dtype == before.dtype and vector.device == before.device
                    and vector.untyped_storage().data_ptr() == before.untyped_storage().data_ptr()
                    and vector.storage_offset() == before.storage_offset() + before.numel())

        blocks: list[torch.Tensor] = []
        loose: list[torch.Tensor] = []
        start = 0
        while start < len(vectors):
            end = start + 1
            while end < len(vectors) and follows(vectors[end - 1], vectors[end]):
                end += 1
            first = vectors[start]
            if end - start == 1:
                loose.append(first.reshape(-1))
            else:
                if loose:
                    blocks.append(torch.stack(loose))
                    loose = []
                blocks.append(torch.as_strided(first, (end - start, first.numel()), (first.numel(), 1),
                                               first.storage_offset()))
            start = end
        if loose:
            blocks.append(torch.stack(loose))
        return blocks

    def _checked_sums(self, layer: int, side: str, own: torch.Tensor, asked: np.ndarray, names: list[str],
                      block: torch.Tensor, constant: torch.Tensor) -> tuple[list[str], np.ndarray]:
        """One side's parts ``(names, [part, k])``, the module's constant a part of its own
        (``L{layer}.{side}_bias``) where it is not zero, checked to add up to the model's own weighted sums."""
        names = list(names)
        if float(constant.abs().max()) > 0:
            names.append(f"L{layer}.{side}_bias")
            block = torch.cat([block, constant[None].to(block.device)])
        expected = torch.stack([(own * torch.as_tensor(weight, dtype=torch.float64, device=own.device)).sum()
                                for weight in asked])
        size = max(float(expected.abs().max()), float(block.abs().sum(0).max()), 1e-6)
        if float((block.sum(0) - expected.to(block.device)).abs().max()) > MATCH_TOLERANCE * size:
            raise self._refuse(f"layer {layer}'s weighted {side} parts do not add up to the model's own")
        return names, block.cpu().numpy()

    def _input_norm(self, layer: int, stream: StreamParts) -> tuple[FrozenNorm | None, str | None]:
        """The norm (divisor fixed) through which layer ``layer``'s attention module reads the stream, and its name;
        ``(None, None)`` where it reads the stream itself (post-norm encoders)."""
        record = self.records[layer]
        real_input = record.attention_input
        if real_input is None or record.query is None:
            raise self._refuse(f"layer {layer}'s attention was not called on the sequence")
        total = stream.total()
        if matches(total, real_input.double()):
            return None, None
        norm_name = next((name for name, (real_in, real_out) in record.norms.items()
                          if real_in is not None and matches(total, real_in) and matches(real_out, real_input)), None)
        if norm_name is None:
            raise self._refuse(f"layer {layer}'s attention reads something other than its input or a norm of it")
        return self._frozen(norm_name, *record.norms[norm_name], self._module(layer, norm_name)), norm_name

    def _attention_input_parts(self, layer: int, stream: StreamParts) -> StreamParts:
        """The stream's parts as layer ``layer``'s attention module reads them: through its input norm (divisor
        fixed, its bias a part of its own), or as they are where it reads the stream itself (post-norm)."""
        norm, norm_name = self._input_norm(layer, stream)
        if norm is None:
            return stream
        parts = stream.through(norm)
        if norm.bias is not None:
            parts.add(f"L{layer}.{norm_name}.bias", norm.bias.expand_as(stream.total()))
        return parts

    def _made_by_attention(self, layer: int, rows: torch.Tensor, keep_graph: bool = False) -> dict[str, torch.Tensor]:
        """The queries, keys and values of ``rows`` as layer ``layer``'s attention module makes them at the traced
        tokens' positions (:meth:`AttentionReplay.made`)."""
        record = self.records[layer]
        replay = AttentionReplay(self.model, self._attention_modules[layer], self.adapter.attention_path,
                                 record.attention_args, record.attention_kwargs, record.inner_norms, self.tokens,
                                 self.length, self._refuse, self._frozen)
        return replay.made(rows, layer, keep_graph)

    def _through_attention(self, layer: int, rows: torch.Tensor,
                           keep_graph: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The queries ``[row, head, token, d]`` and keys of ``rows`` ``[row, token, width]`` as layer ``layer``'s
        attention module makes them at the traced tokens' positions (:class:`AttentionReplay`)."""
        made = self._made_by_attention(layer, rows, keep_graph)
        return made["query"], made["key"]


#: model -> (adapter, shape): a discovered adapter costs a probe pass, found once per model (a weak reference: a
#: model the user drops is freed)
_ADAPTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def traced(model: torch.nn.Module, token_ids, tokens, up_to_layer: int | None, trace=None):
    """A :class:`ResidualTrace` (or the ``trace`` class given) of one sequence, its family found from the model; any
    failure of the model's own code in a pass is one line (:class:`AttributionRefused`)."""
    from qkviz.extraction.adapters import model_adapter
    from qkviz.extraction.models.model_boundary import failure_detail

    known = _ADAPTERS.get(model)
    if known is None:
        adapter = model_adapter(model)
        known = _ADAPTERS[model] = (adapter, adapter.shape(model.config))
    adapter, shape = known
    device = next(model.parameters()).device
    input_ids = torch.as_tensor(np.array(token_ids, dtype=np.int64), device=device)[None]
    try:
        return (trace or ResidualTrace)(model, adapter, shape, input_ids, tokens, up_to_layer=up_to_layer)
    except QkvizError:
        raise
    except Exception as error:  # noqa: BLE001 -- the boundary around the model's own code
        raise AttributionRefused(f"{adapter.family}: attribution refused: its forward pass with qkviz's hooks fails "
                                 f"({failure_detail(error)})") from None


def query_key_parts(model: torch.nn.Module, token_ids, tokens, layer: int) -> QueryKeyParts:
    """Every head's query and key at ``layer`` and at positions ``tokens`` of the sequence ``token_ids``, split by the
    parts of the residual stream entering the layer (:class:`QueryKeyParts`, numpy)."""
    return next(layer_query_key_parts(model, token_ids, tokens, [layer]))[1]


def layer_query_key_parts(model: torch.nn.Module, token_ids, tokens, layers):
    """``(layer, QueryKeyParts)`` for each of ``layers`` (ascending) from one forward pass of the sequence."""
    from qkviz.extraction.models.model_boundary import failure_detail

    layers = sorted(set(int(layer) for layer in layers))
    trace = traced(model, token_ids, tokens, layers[-1])
    wanted = set(layers)
    try:
        for layer, stream in trace.layer_streams():
            if layer in wanted:
                yield layer, trace.query_key_parts(layer, stream)
    except QkvizError:
        raise
    except Exception as error:  # noqa: BLE001 -- the boundary around the model's own code
        raise AttributionRefused(f"{trace.adapter.family}: attribution refused: its attention module, called on the "
                                 f"parts, fails ({failure_detail(error)})") from None


def layer_weighted_sums(model: torch.nn.Module, token_ids, tokens, weights: dict[tuple[int, int], dict]):
    """``((layer, head), {side: (names, [part, k])})`` for every head of ``weights`` (``{(layer, head): {"query":
    [k, token, d_head], "key": [k, token, d_head], "value": [k, token]}}``, per traced token of ``tokens``; ``value``
    optional): each part's weighted sum of its queries and keys, and its share of what the head moves
    (:meth:`ResidualTrace.weighted_sums`), from one forward pass of the sequence and one backward pass through each
    layer's attention module."""
    layers = sorted({layer for layer, _ in weights})
    yield from trace_weighted_sums(traced(model, token_ids, tokens, layers[-1]), weights)


def trace_weighted_sums(trace: ResidualTrace, weights: dict[tuple[int, int], dict]):
    """:func:`layer_weighted_sums` from a trace already made (of the tokens the weights are given at)."""
    from qkviz.extraction.models.model_boundary import failure_detail

    try:
        for layer, stream in trace.layer_streams():
            heads = {head: weights[(layer, head)] for (l_, head) in weights if l_ == layer}
            if heads:
                for head, sums in trace.weighted_sums(layer, stream, heads).items():
                    yield (layer, head), sums
    except QkvizError:
        raise
    except Exception as error:  # noqa: BLE001 -- the boundary around the model's own code
        raise AttributionRefused(f"{trace.adapter.family}: attribution refused: its attention module, run backwards "
                                 f"on the parts, fails ({failure_detail(error)})") from None
