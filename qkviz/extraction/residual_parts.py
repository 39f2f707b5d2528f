"""The residual stream entering a layer, split into the parts that wrote it, and each part's query and key.

One forward pass of one sequence (:class:`ResidualTrace`) keeps, at the tokens asked for, what every layer reads and
writes: its input, what enters its attention's output projection (every head's output side by side), the
projection's output, every norm's input and output, and every sub-module output of the stream's width. From those:

* **the first layer's input** is the token embedding (``embed``), plus the position and token-type embeddings of
  absolute-position models (``position``, ``token_type``), through the embedding norm where there is one;
* **each layer** adds each head's output through its slice of the output projection (``L{l}H{h}``), the
  projection's bias (``L{l}.attn_bias``) and its MLP (``L{l}.mlp``: everything else the layer adds, checked to be
  the output of one of its own sub-modules). A norm on the attention's output (Gemma's and OLMo 2's post-norms)
  is applied to each head with its divisor fixed (:mod:`qkviz.extraction.frozen_norm`); in a post-norm encoder
  (BERT), whose norms re-normalise the whole stream, every part is carried through each norm the same way. A norm's
  bias is a part of its own (``L{l}.<norm>.bias``).

At layer ``L`` the parts go through the layer's input norm (divisor fixed; its bias a part), then through the
layer's own attention module, once for all parts as one batch, with every norm inside it (QK-norm) fixed too, at
each token's own position (rotary families rotate each part where its token is). What the module adds to every
row alike (the projections' biases, the QK-norm's bias) is the part ``L{L}.query_bias`` or ``L{L}.key_bias``.

Every step is checked against the model's own numbers, at every traced token: the parts of each layer's input add
up to that input, the heads to the projection's output, the MLP part to a module's output, and the query and key
parts to the model's own query and key. A family where one does not hold is refused in one line
(:class:`AttributionRefused`): the split is exact or it is not given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from qkviz.core.errors import QkvizError
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.attention_replay import AttentionReplay, PassDone
from qkviz.extraction.capture import AttentionRecorder, LayerCalls, capturing
from qkviz.extraction.forward_pass import forward
from qkviz.extraction.frozen_norm import FrozenNorm, UnknownNorm, frozen_norm, is_norm

#: how closely each reconstruction must match the model's own tensor, relative to that tensor's largest entry
#: (float32 arithmetic over a few hundred parts)
MATCH_TOLERANCE = 2e-4


class AttributionRefused(QkvizError):
    """The split of this family's residual stream cannot be made exact (the one-line reason says which step)."""


def _close(reconstructed: torch.Tensor, real: torch.Tensor) -> bool:
    if reconstructed.shape != real.shape:
        return False
    size = max(float(real.abs().max()), 1e-6)
    return float((reconstructed.double() - real.double()).abs().max()) <= MATCH_TOLERANCE * size


@dataclass
class StreamParts:
    """Parts of the residual stream at the traced tokens: ``vectors[p]`` ``[token, width]`` (float64), and their
    running sum (kept as parts are added or carried through a norm, not re-added each time it is read)."""

    names: list[str] = field(default_factory=list)
    vectors: list[torch.Tensor] = field(default_factory=list)
    running: torch.Tensor | None = None

    def add(self, name: str, vector: torch.Tensor) -> None:
        vector = vector.double()
        self.names.append(name)
        self.vectors.append(vector)
        self.running = vector.clone() if self.running is None else self.running + vector

    def total(self) -> torch.Tensor:
        return self.running

    def copy(self) -> "StreamParts":
        return StreamParts(list(self.names), list(self.vectors), self.running)

    def through(self, norm: FrozenNorm) -> "StreamParts":
        """Every part through ``norm``'s linear part (its divisor fixed per token)."""
        return StreamParts(list(self.names), [norm.linear(vector) for vector in self.vectors],
                           None if self.running is None else norm.linear(self.running))


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


@dataclass
class _LayerRecord:
    input: torch.Tensor | None = None
    output: torch.Tensor | None = None
    heads_in: torch.Tensor | None = None          # what enters the output projection [token, heads x d_value]
    heads_out: torch.Tensor | None = None         # the projection's output [token, width]
    attention_args: tuple | None = None
    attention_kwargs: dict | None = None
    attention_input: torch.Tensor | None = None   # the attention module's hidden_states at the tokens
    norms: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)    # name -> (in, out)
    module_outputs: dict[str, torch.Tensor] = field(default_factory=dict)                 # name -> out [token, width]
    inner_norms: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)   # whole tensors
    query: torch.Tensor | None = None
    key: torch.Tensor | None = None


def _stop_pass(_module, _inputs, _output):
    raise PassDone


def _hidden(output):
    return output[0] if isinstance(output, (tuple, list)) else output


class ResidualTrace:
    """One forward pass of one sequence (batch of one) keeping what splits every layer's input at ``tokens``
    (positions in the sequence); :meth:`parts_entering` and :meth:`query_key_parts` read it.

    ``model`` is the base model or one with a head (the adapter finds its layers); ``input_ids`` ``[1, positions]``."""

    def __init__(self, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, input_ids: torch.Tensor,
                 tokens, *, up_to_layer: int | None = None):
        self.model, self.adapter, self.shape = model, adapter, shape
        self.tokens = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
        self.length = int(input_ids.shape[1])
        first = int(self.tokens[0]) if len(self.tokens) else 0
        #: the tokens as a slice where they are consecutive (a view of each tensor instead of a copy)
        self._span = slice(first, first + len(self.tokens)) if torch.equal(
            self.tokens, torch.arange(first, first + len(self.tokens))) else None
        self.layers = adapter.layer_modules(model)
        if len({id(layer) for layer in self.layers}) != len(self.layers):
            raise AttributionRefused(f"{adapter.family}: its layers share one module (ALBERT); attribution by part "
                                     "needs each layer's own module")
        if adapter.layer_indices is not None:
            raise AttributionRefused(f"{adapter.family}: attribution needs every layer to be an attention layer; "
                                     "this model mixes attention with other layers")
        self.last_layer = shape.n_layers - 1 if up_to_layer is None else up_to_layer
        self._slices = adapter.output_head_slices(model, shape) if adapter.has_output_projection else None
        self._attention_modules = adapter.attention_modules(model)
        self.records = [_LayerRecord() for _ in range(self.last_layer + 1)]
        self.embeddings: list[tuple[str, torch.nn.Module, torch.Tensor]] = []
        self.outside_norms: list[tuple[str, torch.Tensor, torch.Tensor, torch.nn.Module]] = []
        self._run(input_ids)

    # -- the pass ---------------------------------------------------------------------------------------------------
    def _at(self, tensor) -> torch.Tensor | None:
        """``tensor`` at the traced tokens when it is ``[1, positions, ...]`` (or ``[positions, width]``, the batch of
        one flattened, as OPT's and Llama 4's MLPs take it), else None."""
        if not isinstance(tensor, torch.Tensor) or tensor.ndim < 2:
            return None
        tokens = self._span if self._span is not None else self.tokens.to(tensor.device)
        if tensor.ndim == 2 and tensor.shape[0] == self.length and self.length > 1:
            return tensor[tokens].detach().clone()
        if tensor.shape[0] != 1 or tensor.shape[1] != self.length:
            return None
        return tensor[0, tokens].detach().clone()     # a copy: a view would keep the whole sequence's tensor

    def _run(self, input_ids: torch.Tensor) -> None:
        model, adapter = self.model, self.adapter
        width = int(model.get_input_embeddings().weight.shape[-1])
        hooks: list = []
        layer_ids = {id(layer) for layer in self.layers}
        inside = set()
        for layer in self.layers:
            inside.update(id(module) for module in layer.modules())
        token_module = model.get_input_embeddings()
        started = [False]

        def embedding_hook(name):
            def hook(module, _inputs, output):
                if not started[0] and (out := self._at(output)) is not None and out.shape[-1] == width:
                    self.embeddings.append((name, module, out))
            return hook

        def outside_norm_hook(name):
            def hook(module, inputs, output):
                if not started[0] and (out := self._at(output)) is not None:
                    self.outside_norms.append((name, self._at(inputs[0]), out, module))
            return hook

        base = getattr(model, "base_model", model)
        for name, module in base.named_modules():
            if id(module) in inside or id(module) in layer_ids or any(True for _ in module.children()):
                continue
            if is_norm(module):
                hooks.append(module.register_forward_hook(outside_norm_hook(name)))
            elif not isinstance(module, (torch.nn.Dropout, torch.nn.Identity)) and "rotary" not in name.lower():
                hooks.append(module.register_forward_hook(embedding_hook(
                    "embed" if module is token_module else name)))

        attention_modules = adapter.attention_modules(model)
        projections = adapter.output_projections(model) if adapter.has_output_projection else None
        if projections is None:
            raise AttributionRefused(f"{adapter.family}: its attention's output projection is not known, so its "
                                     "heads' outputs cannot be split")
        for index in range(self.last_layer + 1):
            record, layer = self.records[index], self.layers[index]
            hooks.append(layer.register_forward_pre_hook(self._layer_input(index, started), with_kwargs=True))
            hooks.append(layer.register_forward_hook(lambda m, i, out, r=record: setattr(
                r, "output", self._at(_hidden(out)))))
            hooks.append(projections[index].register_forward_pre_hook(lambda m, inputs, r=record: setattr(
                r, "heads_in", self._at(inputs[0]))))
            hooks.append(projections[index].register_forward_hook(lambda m, i, out, r=record: setattr(
                r, "heads_out", self._at(_hidden(out)))))
            attention = attention_modules[index]
            hooks.append(attention.register_forward_pre_hook(self._attention_input(record), with_kwargs=True))
            attention_inner = {id(module) for module in attention.modules()}
            for name, module in layer.named_modules():
                if module is layer or module is attention or module is projections[index]:
                    continue
                if is_norm(module):
                    keep_whole = id(module) in attention_inner
                    hooks.append(module.register_forward_hook(self._norm_hook(record, name, keep_whole)))
                elif id(module) not in attention_inner:
                    hooks.append(module.register_forward_hook(self._output_hook(record, name, width)))

        # nothing past the last traced layer's attention is read: the pass stops there
        hooks.append(attention_modules[self.last_layer].register_forward_hook(_stop_pass))
        recorder = AttentionRecorder(LayerCalls(attention_modules), self._keep_query_key)
        try:
            # no_grad, not inference_mode: what the pass keeps (rotary tables, masks) may enter a backward pass
            with torch.no_grad(), capturing(model, recorder):
                forward(model, input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        except PassDone:
            pass
        finally:
            for hook in hooks:
                hook.remove()

    def _layer_input(self, index: int, started: list):
        def hook(_module, args, kwargs):
            started[0] = True
            hidden = args[0] if args else kwargs.get("hidden_states")
            self.records[index].input = self._at(hidden)
        return hook

    def _attention_input(self, record: _LayerRecord):
        def hook(_module, args, kwargs):
            hidden = args[0] if args else kwargs.get("hidden_states")
            record.attention_args, record.attention_kwargs = args, dict(kwargs)
            record.attention_input = self._at(hidden)
        return hook

    def _norm_hook(self, record: _LayerRecord, name: str, keep_whole: bool):
        def hook(_module, inputs, output):
            if keep_whole:
                record.inner_norms[name] = (inputs[0].detach(), _hidden(output).detach())
            elif (out := self._at(_hidden(output))) is not None:
                record.norms[name] = (self._at(inputs[0]), out)
        return hook

    def _output_hook(self, record: _LayerRecord, name: str, width: int):
        def hook(_module, _inputs, output):
            out = self._at(_hidden(output))
            if out is not None and out.shape[-1] == width and out.ndim == 2:
                record.module_outputs[name] = out
        return hook

    def _keep_query_key(self, layer: int, query: torch.Tensor, key: torch.Tensor, _values) -> None:
        if layer <= self.last_layer:
            record = self.records[layer]
            tokens = self.tokens.to(query.device)
            record.query = query[0][:, tokens].detach()
            record.key = key[0][:, tokens].detach()

    # -- the parts --------------------------------------------------------------------------------------------------
    def _refuse(self, what: str) -> AttributionRefused:
        return AttributionRefused(f"{self.adapter.family}: attribution refused: {what}, so the split would not be "
                                  "exact")

    def _frozen(self, module_name: str, real_in: torch.Tensor, real_out: torch.Tensor,
                module: torch.nn.Module) -> FrozenNorm:
        try:
            return frozen_norm(module, real_in, real_out)
        except UnknownNorm as unknown:
            raise self._refuse(f"its norm {module_name} ({unknown}) is no LayerNorm or RMSNorm form qkviz knows") \
                from None

    def _module(self, layer: int, name: str) -> torch.nn.Module:
        return self.layers[layer].get_submodule(name)

    def first_layer_input(self) -> StreamParts:
        """The parts of the first layer's input: embeddings, through the embedding norm where there is one."""
        first = self.records[0].input
        parts = StreamParts()
        for name, _module, vector in self.embeddings:
            label = "embed" if name == "embed" else ("position" if "position" in name or name.endswith("wpe")
                                                     else "token_type" if "token_type" in name else name)
            parts.add(label, vector)
        if not parts.names or "embed" not in parts.names:
            raise self._refuse("its first layer's input does not come from its token embeddings")
        if _close(parts.total(), first):
            return parts
        for name, real_in, real_out, module in self.outside_norms:
            if real_in is not None and _close(parts.total(), real_in) and _close(real_out, first):
                norm = self._frozen(name, real_in, real_out, module)
                normed = parts.through(norm)
                if norm.bias is not None:
                    normed.add(f"{name}.bias", norm.bias.expand_as(first))
                return normed
        raise self._refuse("its first layer's input is not the sum of its embeddings (" +
                           ", ".join(parts.names) + ")")

    def _head_parts(self, layer: int) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        record = self.records[layer]
        if record.heads_in is None or record.heads_out is None:
            raise self._refuse(f"layer {layer}'s attention output projection was not called on the sequence")
        slices = self._slices[layer].double()                                               # [head, d_value, width]
        per_head = record.heads_in.double().reshape(len(self.tokens), self.shape.n_heads, -1)
        heads = list(torch.bmm(per_head.transpose(0, 1), slices))            # [head][token, width]
        projection = self.adapter.output_projections(self.model)[layer]
        bias = getattr(projection, "bias", None)
        bias = None if bias is None else bias.detach().double().expand_as(record.heads_out)
        total = torch.stack(heads).sum(dim=0) + (0 if bias is None else bias)
        if not _close(total, record.heads_out):
            raise self._refuse(f"layer {layer}'s heads through the output projection do not add up to its output")
        return heads, bias

    def _mlp(self, layer: int, added: torch.Tensor) -> torch.Tensor:
        """``added`` (what the layer adds beside its attention), checked to be one of its modules' output."""
        record = self.records[layer]
        candidates = list(record.module_outputs.values()) + [out for _in, out in record.norms.values()]
        if not any(_close(added, candidate) for candidate in candidates):
            raise self._refuse(f"layer {layer} adds something beside its attention that is not one module's output "
                               "(an MLP)")
        return added

    def _through_layer(self, layer: int, stream: StreamParts) -> StreamParts:
        record = self.records[layer]
        heads, bias = self._head_parts(layer)
        real_heads = record.heads_out.double()
        names = [f"L{layer}H{head}" for head in range(self.shape.n_heads)]
        x = record.input.double()
        norms = {name: (real_in.double(), real_out.double()) for name, (real_in, real_out) in record.norms.items()
                 if real_in is not None}
        post = next((name for name, (real_in, _out) in norms.items() if _close(real_heads, real_in)), None)
        # a post-norm layer's output is a norm's output; a pre-norm layer's (whose MLP norm also reads x + heads) not
        normed_output = any(_close(real_out, record.output.double()) for _in, real_out in norms.values())
        residual = None if post is not None or not normed_output else next(
            (name for name, (real_in, _out) in norms.items() if _close(x + real_heads, real_in)), None)
        if post is not None:                     # a norm on the attention's output (sandwich / post-norms)
            norm = self._frozen(post, *norms[post], self._module(layer, post))
            heads = [norm.linear(head) for head in heads]
            bias = None if bias is None else norm.linear(bias)
            added = norms[post][1]
        elif residual is not None:               # a post-norm encoder: the whole stream re-normalised
            norm = self._frozen(residual, *norms[residual], self._module(layer, residual))
            stream = stream.through(norm)
            heads = [norm.linear(head) for head in heads]
            bias = None if bias is None else norm.linear(bias)
            return self._post_norm_mlp(layer, stream, names, heads, bias, norm, residual, norms)
        else:
            added = real_heads
        out = stream.copy()
        for name, head in zip(names, heads):
            out.add(name, head)
        if bias is not None:
            out.add(f"L{layer}.attn_bias", bias)
        if post is not None and norm.bias is not None:
            out.add(f"L{layer}.{post}.bias", norm.bias.expand_as(x))
        out.add(f"L{layer}.mlp", self._mlp(layer, record.output.double() - x - added))
        return self._checked(layer, out)

    def _post_norm_mlp(self, layer, stream, names, heads, bias, first, first_name, norms) -> StreamParts:
        """A post-norm layer after its attention's norm: ``out = N2(h + mlp)``, ``h`` the first norm's output."""
        record = self.records[layer]
        h = norms[first_name][1]
        second = next((name for name, (_in, real_out) in norms.items()
                       if name != first_name and _close(real_out, record.output.double())), None)
        if second is None:
            raise self._refuse(f"layer {layer}'s output is not a norm of its attention's normed output plus an MLP")
        mlp = self._mlp(layer, norms[second][0] - h)
        norm = self._frozen(second, *norms[second], self._module(layer, second))
        out = stream.through(norm)
        for name, head in zip(names, heads):
            out.add(name, norm.linear(head))
        if bias is not None:
            out.add(f"L{layer}.attn_bias", norm.linear(bias))
        if first.bias is not None:
            out.add(f"L{layer}.{first_name}.bias", norm.linear(first.bias.expand_as(h)))
        out.add(f"L{layer}.mlp", norm.linear(mlp))
        if norm.bias is not None:
            out.add(f"L{layer}.{second}.bias", norm.bias.expand_as(h))
        return self._checked(layer, out)

    def _checked(self, layer: int, parts: StreamParts) -> StreamParts:
        if not _close(parts.total(), self.records[layer].output.double()):
            raise self._refuse(f"layer {layer}'s parts do not add up to its output")
        return parts

    def parts_entering(self, layer: int) -> StreamParts:
        """The parts of the residual stream entering ``layer`` (its input), at the traced tokens."""
        stream = self.first_layer_input()
        for index in range(layer):
            stream = self._through_layer(index, stream)
        return stream

    def layer_streams(self):
        """``(layer, parts entering it)`` for every traced layer, each built on the one before."""
        stream = self.first_layer_input()
        for index in range(self.last_layer + 1):
            yield index, stream
            if index < self.last_layer:
                stream = self._through_layer(index, stream)

    # -- queries and keys -------------------------------------------------------------------------------------------
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
        if not _close(query_parts.sum(dim=0), real_query) or not _close(key_parts.sum(dim=0), real_key):
            raise self._refuse(f"layer {layer}'s query and key parts do not add up to the model's own query and key")
        return QueryKeyParts(query_names, query_parts.cpu().numpy(), key_names, key_parts.cpu().numpy(),
                             real_query.cpu().numpy(), real_key.cpu().numpy())

    def weighted_sums(self, layer: int, stream: StreamParts, weights: dict[int, dict[str, np.ndarray]]) -> dict:
        """For each head ``h`` of ``weights`` (``{"query": [k, token, d_head], "key": [k, token, d_head]}``: ``k``
        weight vectors per side, one per traced token), every part's ``sum_t w_t . q_{t,part}`` (and the same of
        the keys, of the head's key-value head): ``{h: (query names, [part, k], key names, [part, k])}``.

        Each side is linear in the parts, so one backward pass through the layer's attention module gives, per head
        and weight, the vector of the stream each part is dotted with (``A^T w``, ``A`` the module's map with every
        norm fixed); no part's query is ever formed. The sums are checked against the model's own queries and keys
        (their sum over the parts, with the module's constant, must be ``sum_t w_t . q_t``)."""
        record = self.records[layer]
        norm, norm_name = self._input_norm(layer, stream)
        parts = stream if norm is None else StreamParts(running=norm.linear(stream.total()))
        heads = sorted(weights)
        sides = [(head, side, index) for head in heads for side in ("query", "key")
                 for index in range(len(weights[head][side]))]
        total = parts.total() if norm is None or norm.bias is None else parts.total() + norm.bias
        with torch.enable_grad():
            rows = torch.cat([total[None].expand(len(sides), -1, -1), torch.zeros_like(total)[None]])
            rows = rows.to(next(self._attention_modules[layer].parameters()).dtype).detach().requires_grad_(True)
            queries, keys = self._through_attention(layer, rows, keep_graph=True)
            loss = rows.new_zeros(())
            targets = []
            for row, (head, side, index) in enumerate(sides):
                vectors = queries[row, head] if side == "query" else keys[row, self.shape.kv_head_of(head)]
                weight = torch.as_tensor(weights[head][side][index], dtype=vectors.dtype, device=vectors.device)
                loss = loss + (vectors * weight).sum()
                targets.append(weight)
            (gradient,) = torch.autograd.grad(loss, rows)
        gradient = gradient[:-1].double()                          # [row, token, width]
        queries, keys = queries.detach(), keys.detach()
        constants = [float((queries[-1, head] if side == "query" else keys[-1, self.shape.kv_head_of(head)]).double()
                           .mul(target.double()).sum()) for (head, side, _), target in zip(sides, targets)]
        # each part's sum: the part (before the input norm) dotted with the gradient carried back through the norm
        before = gradient if norm is None else norm.transposed(gradient)
        flat = before.reshape(len(before), -1)
        values = torch.cat([torch.stack(stream.vectors[start:start + 64]).reshape(-1, flat.shape[1]) @ flat.T
                            for start in range(0, len(stream.vectors), 64)])                  # [part, row]
        names_before = list(stream.names)
        if norm is not None and norm.bias is not None:
            values = torch.cat([values, (gradient * norm.bias).sum(dim=(1, 2))[None]])
            names_before.append(f"L{layer}.{norm_name}.bias")
        real_query, real_key = record.query.double(), record.key.double()
        out = {}
        for head in heads:
            sums = {}
            for side in ("query", "key"):
                own = real_query[head] if side == "query" else real_key[self.shape.kv_head_of(head)]
                columns = [row for row, (h, s, _) in enumerate(sides) if h == head and s == side]
                names = list(names_before)
                block = values[:, columns]
                constant = torch.tensor([constants[row] for row in columns], dtype=torch.float64)
                if float(constant.abs().max()) > 0:
                    names.append(f"L{layer}.{side}_bias")
                    block = torch.cat([block, constant[None].to(block.device)])
                expected = torch.stack([(own * torch.as_tensor(weights[head][side][index], dtype=torch.float64,
                                                                device=own.device)).sum()
                                        for index in range(len(columns))])
                size = max(float(expected.abs().max()), float(block.abs().sum(0).max()), 1e-6)
                if float((block.sum(0) - expected.to(block.device)).abs().max()) > MATCH_TOLERANCE * size:
                    raise self._refuse(f"layer {layer}'s weighted {side} parts do not add up to the model's own")
                sums[side] = (names, block.cpu().numpy())
            out[head] = (*sums["query"], *sums["key"])
        return out

    def _input_norm(self, layer: int, stream: StreamParts) -> tuple[FrozenNorm | None, str | None]:
        """The norm (divisor fixed) through which layer ``layer``'s attention module reads the stream, and its name;
        ``(None, None)`` where it reads the stream itself (post-norm encoders)."""
        record = self.records[layer]
        real_input = record.attention_input
        if real_input is None or record.query is None:
            raise self._refuse(f"layer {layer}'s attention was not called on the sequence")
        total = stream.total()
        if _close(total, real_input.double()):
            return None, None
        norm_name = next((name for name, (real_in, real_out) in record.norms.items()
                          if real_in is not None and _close(total, real_in) and _close(real_out, real_input)), None)
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

    def _through_attention(self, layer: int, rows: torch.Tensor,
                           keep_graph: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The queries ``[row, head, token, d]`` and keys of ``rows`` ``[row, token, width]`` as layer ``layer``'s
        attention module makes them at the traced tokens' positions (:class:`AttentionReplay`)."""
        record = self.records[layer]
        replay = AttentionReplay(self.model, self._attention_modules[layer], self.adapter.attention_path,
                                 record.attention_args, record.attention_kwargs, record.inner_norms, self.tokens,
                                 self.length, self._refuse, self._frozen)
        return replay.run(rows, layer, keep_graph)

#: id(model) -> (model, adapter, shape): a discovered adapter costs a probe pass, found once per model
_ADAPTERS: dict[int, tuple] = {}


def _traced(model: torch.nn.Module, token_ids, tokens, up_to_layer: int):
    """A :class:`ResidualTrace` of one sequence, its family found from the model; any failure of the model's own
    code in a pass is one line (:class:`AttributionRefused`)."""
    from qkviz.extraction.adapters import model_adapter
    from qkviz.extraction.model_boundary import failure_detail

    known = _ADAPTERS.get(id(model))
    if known is None or known[0] is not model:
        adapter = model_adapter(model)
        known = _ADAPTERS[id(model)] = (model, adapter, adapter.shape(model.config))
    _model, adapter, shape = known
    device = next(model.parameters()).device
    input_ids = torch.as_tensor(np.array(token_ids, dtype=np.int64), device=device)[None]
    try:
        return ResidualTrace(model, adapter, shape, input_ids, tokens, up_to_layer=up_to_layer)
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
    from qkviz.extraction.model_boundary import failure_detail

    layers = sorted(set(int(layer) for layer in layers))
    trace = _traced(model, token_ids, tokens, layers[-1])
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
    """``((layer, head), (query names, [part, k], key names, [part, k]))`` for every head of ``weights``
    (``{(layer, head): {"query": [k, token, d_head], "key": [k, token, d_head]}}``, per traced token of ``tokens``):
    each part's weighted sum of its queries and keys (:meth:`ResidualTrace.weighted_sums`), from one forward pass of
    the sequence and one backward pass through each layer's attention module."""
    from qkviz.extraction.model_boundary import failure_detail

    layers = sorted({layer for layer, _ in weights})
    trace = _traced(model, token_ids, tokens, layers[-1])
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
