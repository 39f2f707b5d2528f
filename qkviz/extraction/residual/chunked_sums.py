"""A circuit's weighted sums over a whole sequence, chunk by chunk, from few passes of the model
(:func:`sequence_weighted_sums`).

The weighted sums of one layer (:meth:`~qkviz.extraction.residual.residual_parts.ResidualTrace.weighted_sums`) hold
every part of the stream entering it at the tokens traced, so a long sequence is split in chunks of a few hundred
tokens. A pass per chunk (a causal model's up to the chunk's end) would run the model over the sequence's prefixes
again and again: twelve chunks of a 3,000-token sequence cost six passes of the whole of it, and their attention
forty times one pass's. Instead, one pass traces a *span* of consecutive chunks -- the whole sequence where its trace
fits in :data:`SPAN_BYTES` -- and each chunk's split is read from that pass's records taken at the chunk's positions:
the same records, the same split, the same checks against the model's own numbers, at fewer tokens.

A causal model's pass over a span ends at the span's last token; a chunk's records in it are those of a pass up to
the chunk's end (to float32 rounding: what follows a token changes nothing before it). A bidirectional model's pass
is always the whole sequence.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np
import torch

from qkviz.extraction.residual.residual_parts import ResidualTrace, trace_weighted_sums, traced
from qkviz.extraction.residual.residual_pass import _LayerRecord

#: the most a span's trace holds (its records at every traced token, every layer up to the last asked for)
SPAN_BYTES = 1_500_000_000
#: what a trace keeps per token and layer, in vectors of the model's width (a layer's input and output, its heads
#: before and after the output projection, its attention's input, its norms' inputs and outputs, its MLP's outputs)
VECTORS_PER_TOKEN = 12


def span_tokens(model: torch.nn.Module, last_layer: int, budget: int | None = None) -> int:
    """How many tokens one traced pass of layers ``0..last_layer`` may keep within ``budget`` bytes
    (:data:`SPAN_BYTES` by default; at least one)."""
    budget = SPAN_BYTES if budget is None else budget
    width = int(model.get_input_embeddings().weight.shape[-1])
    dtype = next(model.parameters()).dtype
    per_token = VECTORS_PER_TOKEN * width * torch.finfo(dtype).bits // 8 * (last_layer + 1)
    return max(1, budget // per_token)


def spans(chunks: list[np.ndarray], tokens: int) -> list[list[int]]:
    """The chunks (consecutive ranges of positions, in order) grouped into spans of consecutive chunks of at most
    ``tokens`` positions each (a chunk longer than that is a span of its own)."""
    grouped: list[list[int]] = []
    for index, chunk in enumerate(chunks):
        if grouped and chunk[-1] + 1 - chunks[grouped[-1][0]][0] <= tokens:
            grouped[-1].append(index)
        else:
            grouped.append([index])
    return grouped


def sequence_weighted_sums(model: torch.nn.Module, token_ids, chunks: list[np.ndarray],
                           weights_of: Callable[[int], dict], last_layer: int, *, causal: bool,
                           budget: int | None = None) -> Iterator[tuple[int, tuple[int, int], dict]]:
    """``(chunk index, (layer, head), {side: (names, [part, k])})`` for every chunk of ``chunks`` (consecutive
    ranges of positions of the sequence ``token_ids``, in order) and every head ``weights_of(index)`` asks for, given
    per token of that chunk as :func:`~qkviz.extraction.residual.layer_weighted_sums` takes them; layers up to
    ``last_layer``. One pass per span of chunks whose trace fits in ``budget`` bytes (:data:`SPAN_BYTES` by
    default)."""
    token_ids = np.asarray(token_ids)
    for span in spans(chunks, span_tokens(model, last_layer, budget)):
        first, last = int(chunks[span[0]][0]), int(chunks[span[-1]][-1])
        ids = token_ids[:last + 1] if causal else token_ids
        trace = traced(model, ids, np.arange(first, last + 1), last_layer)
        for index in span:
            chunk = at_positions(trace, np.asarray(chunks[index]) - first)
            for key, sums in trace_weighted_sums(chunk, weights_of(index)):
                yield index, key, sums
        del trace


def at_positions(trace: ResidualTrace, rows: np.ndarray) -> ResidualTrace:
    """``trace`` at ``rows`` of its traced tokens (indices into them, ascending): a trace as a pass at those tokens
    would have made, read from its records (the attention module's call and the norms inside it kept whole: the split
    takes them at its tokens itself)."""
    rows = torch.as_tensor(np.asarray(rows, dtype=np.int64))
    chunk = copy.copy(trace)
    chunk.tokens = trace.tokens[rows]

    consecutive = bool(len(rows)) and torch.equal(rows, torch.arange(int(rows[0]), int(rows[0]) + len(rows)))

    def at(tensor, axis=0):
        if tensor is None:
            return None
        if consecutive:        # a view: a chunk's records cost no copy
            return tensor.narrow(axis, int(rows[0]), len(rows))
        return tensor.index_select(axis, rows.to(tensor.device))

    chunk.records = [_record_at(record, at) for record in trace.records]
    chunk.embeddings = [(name, module, at(vector)) for name, module, vector in trace.embeddings]
    chunk.outside_norms = [(name, at(real_in), at(real_out), module)
                           for name, real_in, real_out, module in trace.outside_norms]
    if hasattr(trace, "values"):
        chunk.values = {layer: at(value, 1) for layer, value in trace.values.items()}
    return chunk


def _record_at(record: _LayerRecord, at: Callable) -> _LayerRecord:
    return replace(record, input=at(record.input), output=at(record.output), heads_in=at(record.heads_in),
                   heads_out=at(record.heads_out), attention_input=at(record.attention_input),
                   norms={name: (at(real_in), at(real_out)) for name, (real_in, real_out) in record.norms.items()},
                   module_outputs={name: at(out) for name, out in record.module_outputs.items()},
                   query=at(record.query, 1), key=at(record.key, 1))
