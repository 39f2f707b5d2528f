"""One sequence traced once, at every position, and kept without its model: what answers its further pairs.

A pair's split (:func:`~qkviz.extraction.residual.residual_parts.query_key_parts`) needs what every layer up to the
head's reads and writes at the pair's two tokens, and those depend on every token before them: a forward pass of the
sequence, its largest cost. :func:`trace_sequence` runs that pass once, keeping what it reads at **every** position
of the sequence, up to the layer asked (:class:`TracedSequence`); :meth:`TracedSequence.query_key_parts` then answers
any pair of positions at any layer it reaches from those records, without a pass: the records are taken at the two
positions and the split made from them exactly as from a pass at those tokens (the same code, the same checks against
the model's own numbers), the layer's own attention module called on the parts as before.

What is kept is what the pass computed, in its own precision (float32 for a float32 model): the split's float64
arithmetic starts from the same numbers, so an answer from a kept trace is the one from a fresh trace of the same
sequence. Nothing of the model is kept: the layers' modules are looked up again from the model given at each answer
(by their names), the hidden states the attention module was called with are dropped (the split calls it on the
parts), and a pass whose attention inputs hold anything else than tensors and plain values (a module, a cache object)
is marked :attr:`TracedSequence.keepable` False, so that a cache does not keep it. Equal tensors (a layer's output and
the next layer's input, a norm's output and the attention's input, an MLP and its last projection) are kept once, and
the memory the pass freed around them is given back to the system.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace

import numpy as np
import torch

from qkviz.extraction.families.adapter import FamilyAdapter, ModelShape
from qkviz.extraction.residual.residual_parts import QueryKeyParts, ResidualTrace, traced
from qkviz.extraction.residual.residual_pass import ResidualPass, _LayerRecord

#: the values an attention module's call may hold for a kept trace: anything else may hold a module or a cache
_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device)


class _WholeSequenceTrace(ResidualTrace):
    """A trace for pairs, of every position: the model's tensors kept as views, not copied; no layer's values kept
    (the value side of a circuit reads them, a pair does not)."""

    keeps_views = True

    def _value_sink(self):
        return ResidualPass._value_sink(self)


@dataclass
class TracedSequence:
    """What a pass of one sequence of ``length`` positions read at every position, layers ``0..last_layer``
    (``records``, each tensor ``[position, ...]``, queries and keys ``[head, position, d]``), the embeddings
    ``(name, [position, width])`` and the norms outside the layers ``(module name, input, output)``; ``nbytes``:
    the bytes of the tensors it holds, each storage once; ``keepable``: whether it holds nothing of the model."""

    adapter: FamilyAdapter
    shape: ModelShape
    length: int
    records: list[_LayerRecord]
    embeddings: list[tuple[str, torch.Tensor]]
    outside_norms: list[tuple[str, torch.Tensor | None, torch.Tensor]]
    nbytes: int
    keepable: bool

    @property
    def last_layer(self) -> int:
        return len(self.records) - 1

    def reaches(self, layer: int) -> bool:
        """Whether a pair of layer ``layer`` can be answered from this trace."""
        return layer <= self.last_layer

    def query_key_parts(self, model: torch.nn.Module, positions, layer: int) -> QueryKeyParts:
        """Every head's query and key at ``layer`` and at ``positions`` of the sequence, split by the parts of the
        residual stream entering the layer, as :func:`~qkviz.extraction.residual.query_key_parts` gives them (the
        same :class:`~qkviz.extraction.residual.residual_parts.ResidualTrace` code, reading these records)."""
        from qkviz.extraction.models.model_boundary import failure_detail
        from qkviz.extraction.residual.residual_pass import AttributionRefused
        from qkviz.core.errors import QkvizError

        if not self.reaches(layer):
            raise ValueError(f"this trace reaches layer {self.last_layer}, not {layer}")
        rows = torch.as_tensor(np.asarray(positions, dtype=np.int64))
        base = getattr(model, "base_model", model)
        trace = ResidualTrace.from_records(
            model, self.adapter, self.shape, rows, self.length,
            [_record_at(record, rows) for record in self.records[:layer + 1]],
            [(name, None, vector.index_select(0, rows.to(vector.device))) for name, vector in self.embeddings],
            [(name, None if real_in is None else real_in.index_select(0, rows.to(real_in.device)),
              real_out.index_select(0, rows.to(real_out.device)), base.get_submodule(name))
             for name, real_in, real_out in self.outside_norms])
        try:
            return trace.query_key_parts(layer)
        except QkvizError:
            raise
        except Exception as error:  # noqa: BLE001 -- the boundary around the model's own code
            raise AttributionRefused(f"{self.adapter.family}: attribution refused: its attention module, called on "
                                     f"the parts, fails ({failure_detail(error)})") from None


def trace_sequence(model: torch.nn.Module, token_ids, up_to_layer: int) -> TracedSequence:
    """One pass of the sequence ``token_ids`` (the model's, with qkviz's hooks) up to layer ``up_to_layer``'s
    attention, kept at every position (:class:`TracedSequence`); a family whose split is refused, or whose pass
    fails, is one line (:class:`~qkviz.extraction.residual.AttributionRefused`)."""
    token_ids = np.asarray(token_ids, dtype=np.int64)
    trace = traced(model, token_ids, np.arange(len(token_ids)), up_to_layer, trace=_WholeSequenceTrace)
    found = kept(trace)
    del trace
    return_freed_memory()
    return found


def return_freed_memory() -> None:
    """Give the memory the process freed back to the system (glibc's ``malloc_trim``; nothing elsewhere): after a
    trace is made, and after one is dropped. The tensors a trace keeps lie among the pass's freed temporaries, which
    the allocator would otherwise keep: the process's resident memory grew by about twice what a SmolLM2 trace holds
    without it, by what it holds with it."""
    global _TRIM
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


#: glibc's malloc_trim once found (False where there is none)
_TRIM = None


def kept(trace: ResidualTrace) -> TracedSequence:
    """What ``trace`` (of every position of its sequence) read, without its model: each equal tensor once, the
    attention's hidden states dropped (see the module)."""
    once = _Once()
    records = [_kept_record(record, once) for record in trace.records]
    embeddings = [(name, once(vector)) for name, _module, vector in trace.embeddings]
    outside = [(name, once(real_in), once(real_out)) for name, real_in, real_out, _module in trace.outside_norms]
    keepable = all(_plain(record.attention_args) and _plain(record.attention_kwargs) for record in records)
    return TracedSequence(trace.adapter, trace.shape, trace.length, records, embeddings, outside, once.nbytes(),
                          keepable)


class _Once:
    """Each tensor given, or an equal one given before (the same shape, type and values): equal tensors kept once."""

    def __init__(self):
        self._seen: dict[tuple, list[torch.Tensor]] = {}
        self._storages: dict[tuple, int] = {}

    def __call__(self, tensor):
        if not isinstance(tensor, torch.Tensor):
            return tensor
        probe = tensor.reshape(-1)
        ends = (probe[:8].tolist(), probe[-8:].tolist()) if probe.numel() else ((), ())
        fingerprint = (tuple(tensor.shape), tensor.dtype, str(tensor.device), tuple(ends[0]), tuple(ends[1]))
        same = self._seen.setdefault(fingerprint, [])
        for other in same:
            if other is tensor or torch.equal(other, tensor):
                return other
        same.append(tensor)
        return tensor

    def count(self, tensor) -> None:
        """Count a tensor held as it is (not shared by value): its storage, once."""
        if isinstance(tensor, torch.Tensor):
            storage = tensor.untyped_storage()
            self._storages[(storage.data_ptr(), str(tensor.device))] = storage.nbytes()

    def nbytes(self) -> int:
        for tensors in self._seen.values():
            for tensor in tensors:
                self.count(tensor)
        return sum(self._storages.values())


def _kept_record(record: _LayerRecord, once: _Once) -> _LayerRecord:
    """``record`` with each tensor shared where an equal one is kept, and without the attention's hidden states (the
    split calls the attention module on the parts in their place)."""
    args = (None, *record.attention_args[1:]) if record.attention_args else record.attention_args
    kwargs = {name: value for name, value in (record.attention_kwargs or {}).items() if name != "hidden_states"}
    for value in (*args, *kwargs.values(), *(t for pair in record.inner_norms.values() for t in pair)):
        for tensor in _tensors(value):
            once.count(tensor)
    return replace(record, input=once(record.input), output=once(record.output), heads_in=once(record.heads_in),
                   heads_out=once(record.heads_out), attention_input=once(record.attention_input),
                   attention_args=args, attention_kwargs=kwargs,
                   norms={name: (once(real_in), once(real_out)) for name, (real_in, real_out) in record.norms.items()},
                   module_outputs={name: once(out) for name, out in record.module_outputs.items()},
                   query=once(record.query), key=once(record.key))


def _record_at(record: _LayerRecord, rows: torch.Tensor) -> _LayerRecord:
    """``record`` at positions ``rows``: each tensor's rows (queries' and keys' second axis); the attention's call
    and the norms inside it whole (the split takes them at the positions itself)."""
    def at(tensor, axis=0):
        return None if tensor is None else tensor.index_select(axis, rows.to(tensor.device))
    return replace(record, input=at(record.input), output=at(record.output), heads_in=at(record.heads_in),
                   heads_out=at(record.heads_out), attention_input=at(record.attention_input),
                   norms={name: (at(real_in), at(real_out)) for name, (real_in, real_out) in record.norms.items()},
                   module_outputs={name: at(out) for name, out in record.module_outputs.items()},
                   query=at(record.query, 1), key=at(record.key, 1))


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _plain(value) -> bool:
    """Whether ``value`` (an attention call's arguments) holds only tensors and plain values."""
    if isinstance(value, (torch.Tensor, *_PLAIN)):
        return True
    if isinstance(value, (tuple, list)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(name, str) and _plain(item) for name, item in value.items())
    return False
