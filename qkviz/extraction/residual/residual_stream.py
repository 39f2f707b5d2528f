"""The residual stream's parts, layer by layer, from what a traced pass kept (:class:`ResidualStream`): the first
layer's input from the embeddings (through the embedding norm where there is one), then what each layer adds: each
head's output through its slice of the output projection, the projection's bias, the MLP, and every norm's bias, with
each norm's divisor fixed; every step checked against the model's own numbers (:mod:`qkviz.extraction.residual.residual_parts`
tells the whole method).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from qkviz.extraction.residual.frozen_norm import FrozenNorm, UnknownNorm, frozen_norm
from qkviz.extraction.residual.residual_pass import AttributionRefused, ResidualPass

#: how closely each reconstruction must match the model's own tensor, relative to that tensor's largest entry
#: (float32 arithmetic over a few hundred parts)
MATCH_TOLERANCE = 2e-4

#: a difference of tensors the model rounded to float32 is off by a few of their ulps: this many float32 epsilons of
#: the largest of them
ROUNDING = 8 * 2.0 ** -23


def matches(reconstructed: torch.Tensor, real: torch.Tensor, rounded_from: torch.Tensor | None = None) -> bool:
    """Whether ``reconstructed`` is the model's own ``real`` tensor to within :data:`MATCH_TOLERANCE` of its largest
    entry (every step of the split is checked by this one rule). ``rounded_from``: the model's tensor that
    ``reconstructed`` was subtracted from, whose float32 rounding it carries (:data:`ROUNDING` of its largest entry
    more: a token whose residual stream is ten thousand times its MLP's output, a first-token sink's)."""
    if reconstructed.shape != real.shape:
        return False
    size = max(float(real.abs().max()), 1e-6)
    rounding = 0.0 if rounded_from is None else ROUNDING * float(rounded_from.abs().max())
    return float((reconstructed.double() - real.double()).abs().max()) <= MATCH_TOLERANCE * size + rounding


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

    def extend(self, names: list[str], vectors: list[torch.Tensor]) -> None:
        """Add several parts at once: the running sum grows once by their sum, not once per part."""
        vectors = [vector.double() for vector in vectors]
        if not vectors:
            return
        added = vectors[0].clone()
        for vector in vectors[1:]:
            added += vector
        self.names.extend(names)
        self.vectors.extend(vectors)
        self.running = added if self.running is None else self.running + added

    def total(self) -> torch.Tensor:
        return self.running

    def copy(self) -> "StreamParts":
        return StreamParts(list(self.names), list(self.vectors), self.running)

    def through(self, norm: FrozenNorm) -> "StreamParts":
        """Every part through ``norm``'s linear part (its divisor fixed per token)."""
        return StreamParts(list(self.names), [norm.linear(vector) for vector in self.vectors],
                           None if self.running is None else norm.linear(self.running))


class ResidualStream(ResidualPass):
    """The parts of the residual stream entering each traced layer (:meth:`parts_entering`, :meth:`layer_streams`),
    read from the pass; a step that does not add up is refused in one line (:class:`AttributionRefused`)."""

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
        if matches(parts.total(), first):
            return parts
        for name, real_in, real_out, module in self.outside_norms:
            if real_in is not None and matches(parts.total(), real_in) and matches(real_out, first):
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
        product = torch.bmm(per_head.transpose(0, 1), slices)                # [head, token, width]
        heads = list(product)                     # views of one tensor, one after another (no copy)
        projection = self.adapter.output_projections(self.model)[layer]
        bias = getattr(projection, "bias", None)
        bias = None if bias is None else bias.detach().double().expand_as(record.heads_out)
        total = product.sum(dim=0) + (0 if bias is None else bias)
        if not matches(total, record.heads_out):
            raise self._refuse(f"layer {layer}'s heads through the output projection do not add up to its output")
        return heads, bias

    def _mlp(self, layer: int, added: torch.Tensor) -> torch.Tensor:
        """``added`` (what the layer adds beside its attention: its output less its input and its attention's, each
        rounded to float32 by the model), checked to be one of its modules' output."""
        record = self.records[layer]
        candidates = list(record.module_outputs.values()) + [out for _in, out in record.norms.values()]
        if not any(matches(added, candidate, rounded_from=record.output) for candidate in candidates):
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
        post = next((name for name, (real_in, _out) in norms.items() if matches(real_heads, real_in)), None)
        # a post-norm layer's output is a norm's output; a pre-norm layer's (whose MLP norm also reads x + heads) not
        normed_output = any(matches(real_out, record.output.double()) for _in, real_out in norms.values())
        residual = None if post is not None or not normed_output else next(
            (name for name, (real_in, _out) in norms.items() if matches(x + real_heads, real_in)), None)
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
        out.extend(names, heads)
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
                       if name != first_name and matches(real_out, record.output.double())), None)
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
        if not matches(parts.total(), self.records[layer].output.double()):
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
