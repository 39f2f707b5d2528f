"""The exactness gate: before a run is written, the model's own attention proves that qkviz reproduces it.

Two forward passes over the same small batch (the first sentences, cut to :data:`GATE_TOKENS` tokens, padded,
so the padding mask is part of the test): one with qkviz's capture (:mod:`qkviz.extraction.capture.recorder`), which
gives every layer's queries, keys and settings; one with the model's own eager attention, whose probabilities
are read from every attention module's output. The probabilities recomputed from the captured queries and
keys (:func:`recomputed_probabilities`, with :func:`qkviz.core.attention.attention_probs`, the function every
view, statistic and report uses) must match the model's to within :func:`tolerance`.

Two things make the check see what the model does on the run itself:

- A model with a sliding window or an attention chunk (:mod:`qkviz.extraction.gate.attention_span`) is checked a
  second time on the run's longest sequence cut past its span, where the window acts; a run with no sequence
  that long never meets the window, and the manifest says so.
- A half-precision model is checked on float32 weights (:mod:`qkviz.extraction.gate.float32_reference`), so that
  its rounding (9e-2 on SmolLM2 in bfloat16) does not hide a term left out (about 1/40): it is held to the
  float32 bound.

Otherwise the run is refused in one line that names the family, the error and where it is largest, and nothing
is written: a family never seen before is then either exact or refused, never silently wrong.

The first batch's eager pass also checks what output norms need (:mod:`qkviz.extraction.streaming.output_norms`): that each
layer's output projection receives every head's ``sum_j a_ij v_j`` unchanged (no gate, no norm on the way). Where it
does not, the run is written without output norms and its manifest says why; nothing is refused.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import torch

from qkviz.core import LogitRule
from qkviz.core.attention import allowed_keys, attention_logits, attention_probs, masked_softmax
from qkviz.core.errors import QkvizError
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.gate.attention_span import affordable_tokens, compared_rows, long_input_tokens, widest_span
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerAttentionSettings, LayerCalls, capturing, switch_attention
from qkviz.extraction.gate.float32_reference import float32_weights
from qkviz.extraction.capture.forward_pass import forward
from qkviz.extraction.streaming.output_norms import HALF_MIXING_BOUND, MIXING_BOUND, projection_mismatch, unresolved_reason

logger = logging.getLogger(__name__)

#: tokens of each gate sentence: more than a tiny model's test window, few enough to cost one short pass
GATE_TOKENS = 40
GATE_SENTENCES = 2

#: the bounds of :func:`tolerance`, set from ``bench/results/gate_error.json`` (``python -m bench.gate_error``)
FLOAT32_BOUND = 2e-3
HALF_BOUNDS = {torch.float16: 3e-2, torch.bfloat16: 0.3}


@dataclass(frozen=True)
class GateInput:
    """One batch the gate compares on: the model's inputs, each row's real tokens (first), and the query
    positions compared in every row (None: all of them)."""

    inputs: dict[str, torch.Tensor]
    lengths: list[int]
    rows: np.ndarray | None = None

    def describe(self) -> dict:
        return {"tokens": list(self.lengths),
                "rows_compared": "all" if self.rows is None else len(self.rows)}


@dataclass(frozen=True)
class SpanCheck:
    """Whether the gate saw the model's widest window or chunk act: ``span`` tokens (None: attention spans the
    whole sequence), ``exercised`` where one of its inputs was longer, and why not otherwise."""

    span: int | None
    exercised: bool
    note: str = ""

    def as_manifest(self) -> dict:
        return {"span": self.span, "exercised": self.exercised, **({"note": self.note} if self.note else {})}


@dataclass(frozen=True)
class GateResult:
    """What the gate measured: each layer's settings, the largest error and where it is; the bound it was held to,
    the precision it compared in, its inputs and whether the model's window acted in them."""

    settings: dict[int, LayerAttentionSettings]
    max_error: float
    layer: int
    head: int
    bound: float = FLOAT32_BOUND
    compared_in: str = "float32"
    inputs: list[dict] = field(default_factory=list)
    span: SpanCheck = SpanCheck(None, False)
    #: why the run can keep no output norms (:mod:`qkviz.extraction.streaming.output_norms`), None where it can
    no_output_norms: str | None = None
    #: the largest relative difference between an output projection's input and its heads' ``sum_j a_ij v_j``
    output_projection_error: float | None = None

    def as_manifest(self) -> dict:
        return {"max_error": self.max_error, "layer": self.layer, "head": self.head, "bound": self.bound,
                "compared_in": self.compared_in, "inputs": self.inputs, "window": self.span.as_manifest(),
                "output_projection_error": self.output_projection_error}


def tolerance(dtype: torch.dtype) -> float:
    """The largest difference accepted between recomputed and model probabilities, by the precision the model
    computes in during the gate (``bench/results/gate_error.json``: every exact family's tiny model, the windowed
    ones on their long input, MiniLM, SmolLM2 and the random 32-layer Llama of ``bench/modern_model.py``).

    The two passes differ only by rounding, which grows with depth and with the logits: in float32 it is 1e-7 to
    7e-6 on the tiny models and the bundled ones, and 5.2e-4 at most, on the random 32-layer Llama (logits up to
    250). :data:`FLOAT32_BOUND` is about 4x that maximum and 12x below the 1/40 by which a term left out or a mask
    not reproduced moves a probability over 40 keys; half-precision models are held to it too, on float32
    weights (:mod:`qkviz.extraction.gate.float32_reference`). Compared in its own half precision (only where the
    float32 weights would not fit), a model rounds its logits to 8 or 11 bits: SmolLM2 then differs by 6.1e-3 in
    float16 and 8.9e-2 in bfloat16, more than a missing term (and the random 32-layer Llama's two passes drift
    apart entirely: 1.0), so :data:`HALF_BOUNDS` (about 5x and 3.4x SmolLM2's) only catch a gross error (sink
    logits left out: 0.95), and the gate says so."""
    return FLOAT32_BOUND if dtype in (torch.float32, torch.float64) else HALF_BOUNDS.get(dtype, max(HALF_BOUNDS.values()))


def recomputed_probabilities(queries: np.ndarray, keys: np.ndarray, n_keys: int, rows: np.ndarray | None,
                             rule: LogitRule) -> np.ndarray:
    """One head's attention ``[query, key]`` recomputed under its logit ``rule`` from its captured ``queries``
    (``[n_keys, d]``, or ``[len(rows), d]`` at positions ``rows``) and ``keys`` ``[n_keys, d]``, as the run's readers
    recompute it; or several heads' with the same rule at once (``[head, ...]`` first, ``[head, query, key]``, each
    as if alone). The one place the gate turns vectors into probabilities: a term the readers add belongs here too."""
    if rows is None:
        return attention_probs(queries, keys, rule)
    lo, hi = allowed_keys(rows, n_keys, rule)
    positions = np.arange(n_keys)
    allowed = (positions[None, :] >= lo[:, None]) & (positions[None, :] < hi[:, None])
    logits = attention_logits(queries, keys, rule, allowed, query_positions=np.asarray(rows))
    return masked_softmax(logits, sink=rule.sink, overwrite=True)


def check_exactness(model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape,
                    layer_of_module: LayerCalls, inputs: dict[str, torch.Tensor], lengths: list[int],
                    expected_causal: bool | None = None, longest: list[int] | None = None) -> GateResult:
    """Compare the attention recomputed from what qkviz captures on ``inputs`` (one batch whose row ``b`` has
    ``lengths[b]`` real tokens first) with the model's own eager attention, and again on ``longest`` (the token
    ids of the run's longest sequence) where the model has a window or chunk shorter than it; raise a one-line
    :class:`QkvizError` if they differ."""
    with float32_weights(model) as compared_in:
        bound = tolerance(compared_in)
        first = GateInput(inputs, lengths)
        unresolved = unresolved_reason(adapter)
        settings, worst, mixing = measure(model, adapter, shape, layer_of_module, first, mixing=unresolved is None)
        checked = [first]
        span, longer = _span_check(model, shape, settings, max(lengths), longest)
        if longer is not None:
            _, long_worst, _ = measure(model, adapter, shape, layer_of_module, longer)
            checked.append(longer)
            worst = max(worst, long_worst, key=lambda found: found[0])
    error, layer, head, where = worst
    result = GateResult(settings, error, layer, head, bound, str(compared_in).removeprefix("torch."),
                        [batch.describe() for batch in checked], span,
                        unresolved or mixing_refusal(mixing, MIXING_BOUND if bound == FLOAT32_BOUND else HALF_MIXING_BOUND),
                        None if mixing is None else mixing[0])
    if not result.max_error <= bound:
        raise QkvizError(
            f"{adapter.family}: refused: attention recomputed from the captured queries and keys differs from the "
            f"model's own by {error:.2g} (layer {layer}, head {head}, {where}; at most {bound:g} is exact), so the "
            "model adds something q.k cannot express (a position bias, sink logits, a mask qkviz does not "
            "reproduce); nothing was written")
    if expected_causal is not None and any(s.causal != expected_causal for s in settings.values()):
        raise QkvizError(f"{adapter.family}: layers disagree with the family's causality; nothing was written")
    logger.info("exactness gate: %s attention recomputed to within %.1e of the model's own (bound %g, %s, %d "
                "layers, %s)", adapter.family, error, bound, result.compared_in, shape.n_layers,
                " and ".join(f"{max(b.lengths)} tokens" for b in checked))
    if span.note:
        logger.info("exactness gate: %s", span.note)
    return result


def mixing_refusal(mixing: tuple[float, int] | None, bound: float = MIXING_BOUND) -> str | None:
    """Why output norms cannot be kept, from :func:`measure`'s ``(error, layer)`` and the largest error accepted in
    the precision compared in; None where they can."""
    if mixing is None or mixing[0] <= bound:
        return None
    error, layer = mixing
    if error == float("inf"):
        return (f"the output projection of layer {layer} does not receive every head's attention-weighted values "
                "side by side")
    return (f"the attention output is changed before the output projection (a gate or a norm: layer {layer} "
            f"differs by {error:.2g} relative), so a head's slice of the projection does not say what it moves")


def measure(model, adapter: FamilyAdapter, shape: ModelShape, layer_of_module: LayerCalls, batch: GateInput,
            mixing: bool = False
            ) -> tuple[dict[int, LayerAttentionSettings], tuple[float, int, int, str], tuple[float, int] | None]:
    """Each layer's settings, the largest difference between recomputed and model attention on ``batch``:
    ``(error, layer, head, which input)``, and with ``mixing`` (a batch of whole rows) the largest relative
    difference between an output projection's input and its heads' ``sum_j a_ij v_j``: ``(error, layer)``
    (:func:`qkviz.extraction.streaming.output_norms.projection_mismatch`). Measures in the precision the model is in;
    judges nothing."""
    values: dict[int, torch.Tensor] | None = {} if mixing else None
    captured, settings = _captured(model, layer_of_module, batch, shape, adapter.family, values)
    where = f"on {max(batch.lengths)} tokens" + ("" if batch.rows is None else f", {len(batch.rows)} rows compared")
    worst = [0.0, 0, 0]
    probabilities: dict[int, torch.Tensor] = {}
    kv_heads = np.array([shape.kv_head_of(head) for head in range(shape.n_heads)], dtype=np.intp)

    def compare(layer: int, weights: torch.Tensor) -> None:
        if values is not None:
            probabilities[layer] = weights.detach().float().cpu()
        queries, keys = captured.pop(layer)
        heads_by_rule = _heads_by_rule(settings[layer], shape.n_heads)
        for row, n in enumerate(batch.lengths):
            theirs = weights[row, :, :n, :n] if batch.rows is None else weights[row][:, torch.as_tensor(batch.rows), :n]
            theirs = theirs.double().cpu().numpy()
            errors = np.empty(shape.n_heads)
            for rule, heads in heads_by_rule.items():    # the heads alike recomputed at once (ALiBi, sinks: one by one)
                ours = recomputed_probabilities(queries[row, heads, :n] if batch.rows is None else queries[row, heads],
                                                keys[row, kv_heads[heads], :n], n, batch.rows, rule)
                errors[heads] = np.abs(ours - theirs[heads]).max(axis=(1, 2))
            for head, error in enumerate(errors.tolist()):
                if not error <= worst[0]:
                    worst[:] = [error, layer, head]

    received: dict[int, torch.Tensor] = {}
    with _projection_inputs(model, adapter, received if values is not None else None):
        _eager_attention(model, adapter, batch, compare)
    mixed = None
    if values is not None:
        errors = [(projection_mismatch(received[layer], probabilities[layer], values[layer], batch.lengths)
                   if layer in received and layer in values else float("inf"), layer)
                  for layer in range(shape.n_layers)]
        mixed = max(errors, key=lambda found: found[0])
    return settings, (worst[0], worst[1], worst[2], where), mixed


def _heads_by_rule(setting: LayerAttentionSettings, n_heads: int) -> dict[LogitRule, np.ndarray]:
    """A layer's query heads by their logit rule, in head order: one group where every head is alike, a group per
    head under ALiBi slopes or sink logits."""
    grouped: dict[LogitRule, list[int]] = {}
    for head in range(n_heads):
        grouped.setdefault(setting.rule(head), []).append(head)
    return {rule: np.array(heads, dtype=np.intp) for rule, heads in grouped.items()}


@contextlib.contextmanager
def _projection_inputs(model, adapter: FamilyAdapter, received: dict[int, torch.Tensor] | None) -> Iterator[None]:
    """While the context lasts, each layer's output projection's input ``[batch, pos, heads x d_value]`` is kept in
    ``received`` (nothing where ``received`` is None)."""
    if received is None:
        yield
        return
    try:
        projections = adapter.output_projections(model)
    except AttributeError:              # a layer without the projection where the family keeps it: no output norms
        yield
        return
    layer_of = LayerCalls(projections).counter()

    def keep(module, args):
        layer = layer_of(module)
        if layer is not None and args and isinstance(args[0], torch.Tensor):
            received[layer] = args[0].detach().float().cpu()

    handles = [module.register_forward_pre_hook(keep) for module in {id(m): m for m in projections}.values()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _span_check(model, shape: ModelShape, settings: dict[int, LayerAttentionSettings], first_tokens: int,
                longest: list[int] | None) -> tuple[SpanCheck, GateInput | None]:
    """Whether the first batch already exercised the model's widest window or chunk, or a long input must, or
    the run never meets it; the long input where one is needed and affordable."""
    span = widest_span(model.config, settings.values())
    if span is None:
        return SpanCheck(None, False), None
    if first_tokens > span:
        return SpanCheck(span, True), None
    if longest is None or len(longest) <= span:
        return SpanCheck(span, False, f"the model's window or chunk of {span} tokens never acts in this run (no "
                                      f"sequence is longer), so the gate checks it on no longer input"), None
    n = long_input_tokens(span, len(longest))
    if n > affordable_tokens(shape.n_heads):
        note = (f"the model's window or chunk of {span} tokens is NOT checked: its attention over {n} tokens would "
                f"need more than the gate affords for {shape.n_heads} heads ({affordable_tokens(shape.n_heads)} "
                "tokens); the run's attention past the window is unverified")
        logger.warning("exactness gate: %s", note)
        return SpanCheck(span, False, note), None
    device = next(model.parameters()).device
    input_ids = torch.tensor([longest[:n]], dtype=torch.long, device=device)
    long = GateInput({"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}, [n], compared_rows(n))
    return SpanCheck(span, True, f"window or chunk of {span} tokens checked on {n} tokens of the run's longest "
                                 "sequence"), long


def _captured(model, layer_of_module: LayerCalls, batch: GateInput, shape: ModelShape, family: str,
              values: dict[int, torch.Tensor] | None = None
              ) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], dict[int, LayerAttentionSettings]]:
    """Every layer's ``(queries [batch, head, pos, d], keys [batch, kv_head, pos, d])`` float64 (queries at the
    compared positions only) and settings; each layer's values ``[batch, kv_head, pos, d_value]`` into ``values``
    where given."""
    seen: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    rows = None if batch.rows is None else torch.as_tensor(batch.rows)

    def keep(layer, queries, keys, value_norms):
        kept = queries if rows is None else queries[:, :, rows.to(queries.device)]
        seen[layer] = (kept.double().cpu().numpy(), keys.double().cpu().numpy())

    def keep_values(layer, given):
        values[layer] = given.float().cpu()

    recorder = AttentionRecorder(layer_of_module, keep, None if values is None else keep_values)
    with torch.inference_mode(), capturing(model, recorder):
        forward(model, **batch.inputs)
    expected = ((shape.n_heads, shape.head_dim), (shape.n_kv_heads, shape.head_dim))
    shapes = {layer: (q.shape[1::2], k.shape[1::2]) for layer, (q, k) in seen.items()}
    if sorted(seen) != list(range(shape.n_layers)) or any(v != expected for v in shapes.values()):
        raise QkvizError(f"{family}: captured (heads, d_head) per layer {shapes} do not match the model's {shape}")
    return seen, dict(recorder.settings)


def _eager_attention(model, adapter: FamilyAdapter, batch: GateInput, compare) -> None:
    """Run the model's own eager attention on ``batch`` and hand each attention layer's probabilities
    ``[batch, head, query, key]`` to ``compare(layer, probabilities)`` as the layer returns them (each attention
    module returns them beside its output), so that no more than one layer's are held. The long input's pass does
    not ask the model to collect them all (``output_attentions``) unless a layer returns none unasked."""
    modules = adapter.attention_modules(model)
    layer_of = LayerCalls(modules).counter()      # a shared layer's module: its k-th call is its k-th layer
    done: set[int] = set()

    def keep(module, _args, output):
        layer = layer_of(module)
        if layer is None or layer in done:
            return
        probabilities = _probabilities_in(output)
        if probabilities is not None:
            done.add(layer)
            compare(layer, probabilities.detach())

    previous = model.config._attn_implementation
    switch_attention(model, "eager")
    handles = [module.register_forward_hook(keep) for module in {id(module): module for module in modules}.values()]
    try:
        with torch.inference_mode():
            forward(model, **batch.inputs, output_attentions=batch.rows is None)
            if len(done) < len(modules) and batch.rows is not None:
                forward(model, **batch.inputs, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
        switch_attention(model, previous)
    if len(done) < len(modules):
        raise QkvizError(f"{adapter.family}: its eager attention returns no probabilities for layers "
                         f"{sorted(set(range(len(modules))) - done)}, so qkviz cannot check it; nothing was "
                         "written")


def _probabilities_in(output) -> torch.Tensor | None:
    """The attention probabilities ``[batch, head, query, key]`` an attention module returns beside its output: its
    second result (the attention interface's modules), or, from families with their own attention code, the first
    4-dimensional tensor after the output in what it returns (a list, or tuples in tuples: I-BERT's scaling factors,
    LUKE's entity states)."""
    if not isinstance(output, (tuple, list)) or len(output) < 2:
        return None
    if isinstance(output[1], torch.Tensor):
        return output[1]
    pending = list(output[1:]) if not isinstance(output[0], (tuple, list)) else [*output[0][1:], *output[1:]]
    while pending:
        item = pending.pop(0)
        if isinstance(item, torch.Tensor) and item.dim() == 4:
            return item
        if isinstance(item, (tuple, list)):
            pending[:0] = list(item)
    return None
