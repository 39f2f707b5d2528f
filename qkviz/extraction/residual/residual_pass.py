"""One forward pass of one sequence that keeps, at the tokens asked for, what every layer reads and writes
(:class:`ResidualPass`): its input, what enters its attention's output projection (every head's output side by side),
the projection's output, every norm's input and output, every sub-module output of the stream's width, what its
attention module was called with, and the model's own query and key. The stream's parts are read from it by
:mod:`qkviz.extraction.residual.residual_stream`, their queries and keys by :mod:`qkviz.extraction.residual.residual_parts` (which
tells the whole method).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from qkviz.core.errors import QkvizError
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.residual.attention_replay import PassDone
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerCalls, capturing
from qkviz.extraction.capture.forward_pass import forward
from qkviz.extraction.residual.frozen_norm import is_norm


class AttributionRefused(QkvizError):
    """The split of this family's residual stream cannot be made exact (the one-line reason says which step)."""


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


#: the families whose pass changes a tensor in place after qkviz read it: traced with copies
_CHANGED_IN_PLACE: set[str] = set()


def _stop_pass(_module, _inputs, _output):
    raise PassDone


def _hidden(output):
    return output[0] if isinstance(output, (tuple, list)) else output

class ResidualPass:
    """One forward pass of one sequence (batch of one) keeping what splits every layer's input at ``tokens``
    (positions in the sequence): ``records[layer]``, the embeddings and the norms outside the layers.

    ``model`` is the base model or one with a head (the adapter finds its layers); ``input_ids`` ``[1, positions]``."""

    #: whether a trace of every position keeps the model's tensors as views rather than copies (:meth:`_keep_tensor`)
    keeps_views = False

    def __init__(self, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, input_ids: torch.Tensor,
                 tokens, *, up_to_layer: int | None = None):
        self._bind(model, adapter, shape, tokens, int(input_ids.shape[1]), up_to_layer)
        self._run_kept(input_ids)
        if self._viewed and any(tensor._version != version for tensor, version in self._viewed):
            # the model changed a tensor in place after it was read (Falcon adds its attention to its MLP's output):
            # its family is traced with copies from now on, this pass again now
            _CHANGED_IN_PLACE.add(adapter.family)
            self._views = False
            self._run_kept(input_ids)

    def _run_kept(self, input_ids: torch.Tensor) -> None:
        self.records = [_LayerRecord() for _ in range(self.last_layer + 1)]
        self.embeddings: list[tuple[str, torch.nn.Module | None, torch.Tensor]] = []
        self.outside_norms: list[tuple[str, torch.Tensor, torch.Tensor, torch.nn.Module]] = []
        self._viewed: list[tuple[torch.Tensor, int]] = []
        self._run(input_ids)

    @classmethod
    def from_records(cls, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, tokens, length: int,
                     records: list[_LayerRecord], embeddings: list, outside_norms: list):
        """A trace of ``tokens`` (positions of a sequence of ``length``) made of what an earlier pass kept at them
        (``records`` of layers ``0..len(records) - 1``, the embeddings and the norms outside the layers), bound to
        ``model``: no pass is run (:mod:`qkviz.extraction.residual.traced_sequence`)."""
        trace = cls.__new__(cls)
        trace._bind(model, adapter, shape, tokens, length, len(records) - 1)
        trace.records, trace.embeddings, trace.outside_norms = records, embeddings, outside_norms
        return trace

    def _bind(self, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, tokens, length: int,
              up_to_layer: int | None) -> None:
        """The model, its family and what the trace reads of it (its layers, attention modules, heads' slices of the
        output projection); a model whose layers cannot be split is refused in one line."""
        self.model, self.adapter, self.shape = model, adapter, shape
        self.tokens = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
        self.length = length
        first = int(self.tokens[0]) if len(self.tokens) else 0
        #: the tokens as a slice where they are consecutive (a view of each tensor instead of a copy)
        self._span = slice(first, first + len(self.tokens)) if torch.equal(
            self.tokens, torch.arange(first, first + len(self.tokens))) else None
        #: every position traced, by a trace that keeps views (:meth:`_keep_tensor`)
        self._views = (self.keeps_views and self._span is not None and first == 0 and len(self.tokens) == length
                       and adapter.family not in _CHANGED_IN_PLACE)
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

    # -- the pass ---------------------------------------------------------------------------------------------------
    def _at(self, tensor) -> torch.Tensor | None:
        """``tensor`` at the traced tokens when it is ``[1, positions, ...]`` (or ``[positions, width]``, the batch of
        one flattened, as OPT's and Llama 4's MLPs take it), else None."""
        if not isinstance(tensor, torch.Tensor) or tensor.ndim < 2:
            return None
        tokens = self._span if self._span is not None else self.tokens.to(tensor.device)
        if tensor.ndim == 2 and tensor.shape[0] == self.length and self.length > 1:
            return self._keep_tensor(tensor[tokens])
        if tensor.shape[0] != 1 or tensor.shape[1] != self.length:
            return None
        return self._keep_tensor(tensor[0, tokens])

    def _keep_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` (at the traced tokens) as the trace keeps it: a copy, since a view would keep the whole
        sequence's tensor. A trace of every position that :attr:`keeps_views` keeps the view, which holds no more
        than a copy would (a copy of every tensor of a whole sequence costs a quarter of its pass), with its version:
        one the model changes in place later in the pass makes the pass run again with copies."""
        if not self._views:
            return tensor.detach().clone()
        tensor = tensor.detach()
        self._viewed.append((tensor, tensor._version))
        return tensor

    def _run(self, input_ids: torch.Tensor) -> None:
        model, adapter = self.model, self.adapter
        width = int(model.get_input_embeddings().weight.shape[-1])
        started = [False]
        hooks = self._outside_hooks(width, started)
        attention_modules = adapter.attention_modules(model)
        projections = adapter.output_projections(model) if adapter.has_output_projection else None
        if projections is None:
            raise AttributionRefused(f"{adapter.family}: its attention's output projection is not known, so its "
                                     "heads' outputs cannot be split")
        for index in range(self.last_layer + 1):
            hooks.extend(self._layer_hooks(index, attention_modules[index], projections[index], width, started))
        hooks.extend(self._end_hooks(attention_modules, started))
        recorder = AttentionRecorder(LayerCalls(attention_modules), self._keep_query_key, self._value_sink())
        try:
            # no_grad, not inference_mode: what the pass keeps (rotary tables, masks) may enter a backward pass
            with torch.no_grad(), capturing(model, recorder):
                forward(model, input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        except PassDone:
            pass
        finally:
            for hook in hooks:
                hook.remove()

    def _value_sink(self):
        """What receives each layer's values (``(layer, value)``): nothing, here; a trace that splits values keeps
        them (:class:`~qkviz.extraction.residual.residual_parts.ResidualTrace`)."""
        return None

    def _end_hooks(self, attention_modules: list, _started: list) -> list:
        """Where the pass ends: nothing past the last traced layer's attention is read, so it stops there."""
        return [attention_modules[self.last_layer].register_forward_hook(_stop_pass)]

    def _outside_hooks(self, width: int, started: list) -> list:
        """Hooks on the modules outside the layers, before the first layer starts: each embedding's output (of the
        model's width) and each norm's input and output."""
        model = self.model
        hooks: list = []
        layer_ids = {id(layer) for layer in self.layers}
        inside = set()
        for layer in self.layers:
            inside.update(id(module) for module in layer.modules())
        token_module = model.get_input_embeddings()

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
        return hooks

    def _layer_hooks(self, index: int, attention, projection, width: int, started: list) -> list:
        """Hooks on layer ``index``: its input and output, its heads' outputs before and after the output
        projection, its attention's input, and each norm and other part inside it."""
        record, layer = self.records[index], self.layers[index]
        hooks = [layer.register_forward_pre_hook(self._layer_input(index, started), with_kwargs=True),
                 layer.register_forward_hook(lambda m, i, out, r=record: setattr(r, "output", self._at(_hidden(out)))),
                 projection.register_forward_pre_hook(lambda m, inputs, r=record: setattr(
                     r, "heads_in", self._at(inputs[0]))),
                 projection.register_forward_hook(lambda m, i, out, r=record: setattr(
                     r, "heads_out", self._at(_hidden(out)))),
                 attention.register_forward_pre_hook(self._attention_input(record), with_kwargs=True)]
        attention_inner = {id(module) for module in attention.modules()}
        for name, module in layer.named_modules():
            if module is layer or module is attention or module is projection:
                continue
            if is_norm(module):
                keep_whole = id(module) in attention_inner
                hooks.append(module.register_forward_hook(self._norm_hook(record, name, keep_whole)))
            elif id(module) not in attention_inner:
                hooks.append(module.register_forward_hook(self._output_hook(record, name, width)))
        return hooks

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
            if self._views:
                record.query, record.key = self._keep_tensor(query[0]), self._keep_tensor(key[0])
                return
            tokens = self.tokens.to(query.device)
            record.query = query[0][:, tokens].detach()
            record.key = key[0][:, tokens].detach()
