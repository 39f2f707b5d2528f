"""Capture each layer's queries and keys as they enter the attention dot product.

Hugging Face models call their attention through ``ALL_ATTENTION_FUNCTIONS`` with the query and
key states *after* bias, QK-norm and the rotary rotation and *before* the scale factor, shaped
``[batch, head, pos, d_head]`` (keys with the key-value heads only). We register one attention
implementation, :data:`CAPTURE_IMPLEMENTATION`, that hands those tensors to the active
:class:`AttentionRecorder` and then runs PyTorch's scaled-dot-product attention, so capturing
costs one extra copy and no fork of any model code. The few families that compute attention in a method of
their own (:data:`METHOD_CAPTURES`, read from the families' declarations: :mod:`qkviz.extraction.families`) or in
their attention module's own code
(:mod:`qkviz.extraction.capture.own_code_capture`) hand the same tensors to the same recorder. Which layer a call is comes
from :class:`LayerCalls` (a shared layer, ALBERT's, is every layer in turn).
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from qkviz.core.errors import QkvizError
from qkviz.core.logit_rule import LogitRule
from qkviz.extraction.capture.alibi_capture import mask_alibi_slopes
from qkviz.extraction.capture.block_sparse import attending_in_full
from qkviz.extraction.capture.own_code_capture import capturing_own_code, own_code_modules
from qkviz.extraction.families import MethodCapture, ProjectionCapture, declared_captures

CAPTURE_IMPLEMENTATION = "qkviz_capture"
#: what a family with its own attention code may run while captured: both reach the products qkviz watches
OWN_CODE_IMPLEMENTATIONS = ("eager", "sdpa")
#: an attention that computes nothing (zeros), for passes that read only what enters attention (positions)
SKIP_IMPLEMENTATION = "qkviz_skip_attention"

#: ``sink(layer, queries, keys, value_norms)`` with tensors ``[batch, head, pos, d_head]``,
#: ``[batch, kv_head, pos, d_head]`` and ``[batch, kv_head, pos]``.
LayerSink = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None]
#: ``values(layer, values)``: the values themselves, ``[batch, kv_head, pos, d_value]`` (what output norms are made of)
ValueSink = Callable[[int, torch.Tensor], None]


@dataclass(frozen=True)
class LayerAttentionSettings:
    """What a layer's attention applies beyond ``q . k``, as the model passed it: per layer, and per head the
    ALiBi slopes and sink logits where the model has them."""

    scale: float
    causal: bool
    sliding_window: int | None
    softcap: float | None
    chunk: int | None = None
    alibi_slopes: tuple[float, ...] | None = None
    sinks: tuple[float, ...] | None = None

    def rule(self, head: int) -> LogitRule:
        """Query head ``head``'s :class:`~qkviz.core.logit_rule.LogitRule` (what every recomputation applies)."""
        return LogitRule(scale=self.scale, causal=self.causal, window=self.sliding_window, chunk=self.chunk,
                         softcap=self.softcap,
                         alibi_slope=None if self.alibi_slopes is None else self.alibi_slopes[head],
                         sink=None if self.sinks is None else self.sinks[head])


class LayerCalls:
    """Which layer each call of an attention module is: the ``k``-th call of a module in a forward pass is the ``k``-th
    of the layers it serves. Most models have one module per layer; ALBERT calls one shared layer once per layer, so
    its one attention module serves every layer, in call order."""

    def __init__(self, modules: list[torch.nn.Module]):
        """``modules``: the attention module of every layer, in layer order (a shared module once per layer)."""
        served: dict[int, list[int]] = {}
        for layer, module in enumerate(modules):
            served.setdefault(id(module), []).append(layer)
        self._layers = {key: tuple(layers) for key, layers in served.items()}
        self.n_layers = len(modules)

    def counter(self) -> Callable[[torch.nn.Module], int | None]:
        """A fresh count of calls: ``layer_of(module)`` is the layer of this call of ``module`` (None: not a layer's).
        Every forward pass calls a module once per layer it serves, so the count goes round with each pass."""
        calls: dict[int, int] = {}

        def layer_of(module: torch.nn.Module) -> int | None:
            layers = self._layers.get(id(module))
            if layers is None:
                return None
            count = calls.get(id(module), 0)
            calls[id(module)] = count + 1
            return layers[count % len(layers)]

        return layer_of


@contextlib.contextmanager
def one_torch_thread(threads: int) -> Iterator[None]:
    """torch's operators on one thread while the block runs, then on ``threads`` again (those the caller's thread had
    before it began: :func:`torch.get_num_threads`; the setting is the calling thread's own)."""
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class AttentionRecorder:
    """Receives every attention call of one model and forwards it to a sink, per layer.

    ``one_thread``: what the recorder and its sinks compute on each call (the value norms, the sinks' copies and
    encodings) runs on one thread, the model's own operators on as many as torch has. Those are small operators over
    one layer's queries and keys, a few hundred microseconds each: split over torch's threads they gain little on an
    idle machine, and on a loaded one each pays for the threads to meet (a thread that another process holds keeps the
    other waiting), which cost extraction more than the operators' own work (the streaming capture sets it:
    :func:`qkviz.extraction.streaming.chunk_capture.recording`). The numbers are the same on any number of threads."""

    def __init__(self, layer_calls: LayerCalls, sink: LayerSink, values: ValueSink | None = None,
                 one_thread: bool = False):
        self._layer_of = layer_calls.counter()
        self._sink = sink
        self._values = values
        self._threads = torch.get_num_threads() if one_thread else 1
        self.settings: dict[int, LayerAttentionSettings] = {}

    def record(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
               value: torch.Tensor, scaling: float | None, kwargs: dict) -> None:
        with one_torch_thread(self._threads):
            self._record(module, query, key, value, scaling, kwargs)

    def _record(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                value: torch.Tensor, scaling: float | None, kwargs: dict) -> None:
        layer = self._layer_of(module)
        if layer is None:
            raise RuntimeError(f"attention module {type(module).__name__} is not one of the mapped layers")
        scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
        window = kwargs.get("sliding_window")
        softcap = kwargs.get("softcap")
        causal = kwargs.get("is_causal")
        chunk = attention_chunk(module)
        slopes = kwargs.get("alibi_slopes")
        if slopes is None:
            slopes = mask_alibi_slopes(module, key.shape[-2])
        self.settings[layer] = LayerAttentionSettings(
            scale=scale,
            causal=bool(getattr(module, "is_causal", False) if causal is None else causal),
            sliding_window=int(window) if window else None,
            softcap=float(softcap) if softcap else None,
            chunk=int(chunk) if chunk else None,
            alibi_slopes=per_head(slopes),
            sinks=per_head(kwargs.get("s_aux")),
        )
        # the norms computed position-first, as the model lays its values out: [batch, kv_head, pos] seen over a
        # [batch, pos, kv_head] tensor, which a sink takes token by token without a copy
        value_norms = torch.linalg.vector_norm(value.detach().movedim(2, 1), dim=-1).movedim(1, 2)
        self._sink(layer, query.detach(), key.detach(), value_norms)
        if self._values is not None:
            self._values(layer, value.detach())


def attention_chunk(module: torch.nn.Module) -> int | None:
    """The chunk size of ``module``'s layer where the model attends within chunks of tokens there (Llama 4: its
    layers of type ``chunked_attention`` build their mask from ``attention_chunk_size``), else None."""
    config = getattr(module, "config", None)
    chunk = getattr(config, "attention_chunk_size", None)
    layer_types = getattr(config, "layer_types", None)
    layer = getattr(module, "layer_idx", None)
    if not chunk or layer_types is None or layer is None or layer >= len(layer_types):
        return None
    return int(chunk) if layer_types[layer] == "chunked_attention" else None


def per_head(values: torch.Tensor | None) -> tuple[float, ...] | None:
    """A per-head term the model passed (a sink logit, an ALiBi slope per head) as plain floats, or None."""
    return None if values is None else tuple(float(v) for v in values.detach().float().reshape(-1).cpu())


_active_recorder: contextvars.ContextVar[AttentionRecorder | None] = contextvars.ContextVar(
    "qkviz_active_recorder", default=None)


def _capturing_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    recorder = _active_recorder.get()
    if recorder is not None:
        recorder.record(module, query, key, value, scaling, kwargs)
    plain = kwargs.get("softcap") is None and kwargs.get("s_aux") is None
    compute = ALL_ATTENTION_FUNCTIONS["sdpa"] if plain else _eager_terms_attention
    return compute(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def _eager_terms_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None,
                           s_aux=None, **kwargs):
    """Eager attention with what PyTorch's scaled-dot-product attention cannot do: the logit soft-capped
    (``softcap * tanh(logit / softcap)``, Gemma 2) and a sink logit per head in the softmax's denominator
    (``s_aux``, gpt-oss): ``(output [batch, pos, head, d_value], probabilities)``, as the model computes them."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    logits = torch.matmul(query, key.transpose(2, 3)) * scale
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    if attention_mask is None and getattr(module, "is_causal", True) and query.shape[2] > 1:
        attention_mask = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device).tril()
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            logits = logits.masked_fill(~attention_mask, torch.finfo(logits.dtype).min)
        else:
            logits = logits + attention_mask[..., : key.shape[2]]
    if s_aux is not None:
        sinks = s_aux.reshape(1, -1, 1, 1).to(logits.dtype).expand(*logits.shape[:-1], 1)
        logits = torch.cat([logits, sinks], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
    probabilities = torch.softmax(logits, dim=-1, dtype=torch.float32).to(query.dtype)
    if s_aux is not None:
        probabilities = probabilities[..., :-1]
    return torch.matmul(probabilities, value).transpose(1, 2).contiguous(), probabilities


def _skipped_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    batch, heads, positions, _ = query.shape
    # [batch, pos, head, d_value] and contiguous, as attention returns (some families .view() it)
    return query.new_zeros(batch, positions, heads, value.shape[-1]), None


AttentionInterface.register(CAPTURE_IMPLEMENTATION, _capturing_attention)
AttentionMaskInterface.register(CAPTURE_IMPLEMENTATION, sdpa_mask)
AttentionInterface.register(SKIP_IMPLEMENTATION, _skipped_attention)
AttentionMaskInterface.register(SKIP_IMPLEMENTATION, sdpa_mask)


#: attention class name -> where its queries and keys are captured (declared exceptions, each in its family's
#: declaration; every other family goes through the attention interface)
METHOD_CAPTURES: dict[str, MethodCapture] = declared_captures(MethodCapture)
#: attention class name -> the fused projection its queries and keys are split off (declared exceptions)
PROJECTION_CAPTURES: dict[str, ProjectionCapture] = declared_captures(ProjectionCapture)


def _projection_hook(module: torch.nn.Module, declared: ProjectionCapture):
    def hook(_projection, _inputs, output):
        recorder = _active_recorder.get()
        if recorder is not None:
            query, key, value = declared.split(module, output)
            settings = declared.settings(module)
            recorder.record(module, query, key, value, settings.pop("scaling"), settings)
    return hook


def _captured_method(module: torch.nn.Module, declared: MethodCapture):
    original = getattr(module, declared.method)

    def record(query, key, value) -> None:
        recorder = _active_recorder.get()
        if recorder is not None:
            settings = declared.settings(module)
            recorder.record(module, query, key, value, settings.pop("scaling"), settings)

    def method(query, key, value, attention_mask=None, *args, **kwargs):
        record(query, key, value)
        return original(query, key, value, attention_mask, *args, **kwargs)

    def splitting(*args, **kwargs):
        query, key, value = split = original(*args, **kwargs)
        record(query, key, value)
        return split

    return splitting if declared.returns_qkv else method


@contextlib.contextmanager
def _method_captures(model: torch.nn.Module) -> Iterator[None]:
    """The declared :data:`METHOD_CAPTURES` and :data:`PROJECTION_CAPTURES` of ``model``'s modules, in place while
    the context lasts."""
    patched, hooks = [], []
    for module in model.modules():
        declared = METHOD_CAPTURES.get(type(module).__name__)
        # A release that moved the family onto the attention interface (GPT-J and CodeGen in transformers 5.24)
        # has no such method: the interface captures it.
        if declared is not None and callable(getattr(module, declared.method, None)):
            setattr(module, declared.method, _captured_method(module, declared))
            patched.append((module, declared.method))
        split = PROJECTION_CAPTURES.get(type(module).__name__)
        if split is not None:
            projection = getattr(module, split.projection)
            hooks.append(projection.register_forward_hook(_projection_hook(module, split)))
    try:
        yield
    finally:
        for module, name in patched:
            delattr(module, name)
        for hook in hooks:
            hook.remove()


@contextlib.contextmanager
def without_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model`` with every attention call returning zeros: a pass over thousands of positions that reads
    only their rotary tables or position embeddings costs no ``n x n`` attention."""
    if own_code_modules(model):     # attention is its own code: it cannot be skipped, only computed
        yield
        return
    previous = model.config._attn_implementation
    model.set_attn_implementation(SKIP_IMPLEMENTATION)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def switch_attention(model: torch.nn.Module, implementation: str) -> None:
    """``model.set_attn_implementation(implementation)``, or a one-line :class:`QkvizError` where the model cannot
    switch (its attention is fixed).

    A model whose attention is its own code (:mod:`qkviz.extraction.capture.own_code_capture`) is not switched by transformers
    (it warns and keeps its setting), but its code reads the setting from its configuration at every call (to choose
    between PyTorch's fused attention and its own eager code, and which mask to build): there the configuration's
    setting is changed."""
    try:
        if own_code_modules(model):
            model.config._attn_implementation = implementation
        else:
            model.set_attn_implementation(implementation)
    except Exception as error:  # noqa: BLE001 -- transformers refuses in several ways
        detail = (str(error).strip().splitlines() or [""])[0][:160]
        family = getattr(model.config, "model_type", None) or type(model).__name__
        raise QkvizError(f"{family}: its attention implementation cannot be switched to {implementation!r} "
                         f"({detail}); qkviz captures and checks attention through that switch") from None


@contextlib.contextmanager
def capturing(model: torch.nn.Module, recorder: AttentionRecorder) -> Iterator[AttentionRecorder]:
    """Run ``model`` with ``recorder`` receiving every layer's queries and keys. A model whose attention is computed by
    its own code (:mod:`qkviz.extraction.capture.own_code_capture`) runs that code as it is set (PyTorch's fused attention
    where the family offers it: Falcon, no ``n x n`` scores at length; its eager code otherwise, with the masks it
    builds for each), watched where it multiplies queries by keys."""
    previous = model.config._attn_implementation
    with attending_in_full(model):          # a block-sparse BigBird: full attention, as its own code switches to
        own_code = own_code_modules(model)
        switch_attention(model, (previous if previous in OWN_CODE_IMPLEMENTATIONS else "eager") if own_code
                         else CAPTURE_IMPLEMENTATION)
        token = _active_recorder.set(recorder)
        try:
            with _method_captures(model), capturing_own_code(own_code, model.config, recorder.record):
                yield recorder
        finally:
            _active_recorder.reset(token)
            switch_attention(model, previous)
