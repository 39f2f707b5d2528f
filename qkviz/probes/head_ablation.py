"""Whether a head matters: the model run clean and with heads ablated, compared per token (torch).

A head is ablated where its output enters its layer's attention output projection: its slice of the projection's
input (every head's output side by side, ``[batch, pos, heads x d_value]``, after any gate the family applies) is
set to zero (``mode="zero"``) or to its mean over the real tokens of the sequences given (``mode="mean"``, measured
in a first clean pass over the same sequences, or given as ``mean=``). Nothing else changes: the shared output bias,
the other heads and every later layer run as they are. Several heads are ablated together when several are given.

What is compared, per token (:attr:`Ablation.measure`):

* ``"next-token loss"``: a causal model with its language-model head. ``clean`` and ``ablated`` are the
  cross-entropy of the model's own prediction of the next token id, ``-log p(t_{i+1} | t_0..t_i)`` in nats; a
  sequence's last token has no next token: NaN. ``change = ablated - clean``.
* ``"hidden-state change"``: an encoder, or any model without its language-model head. ``change`` is
  ``||h_ablated - h_clean|| / ||h_clean||``, the relative change of the model's last hidden state at the token (its
  output before any head); ``clean`` and ``ablated`` are NaN (there is no loss to compare).

Sequences are fed as given (no special tokens added), right-padded in batches of about :data:`BATCH_TOKENS`
tokens with an attention mask, longest first, with no gradient.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from qkviz.core.errors import QkvizError
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture.recorder import LayerCalls
from qkviz.extraction.capture.forward_pass import forward

logger = logging.getLogger(__name__)

ABLATION_MODES = ("zero", "mean")
NEXT_TOKEN_LOSS = "next-token loss"
HIDDEN_STATE_CHANGE = "hidden-state change"
#: padded tokens per batch (a language model's logits are tokens x vocabulary floats)
BATCH_TOKENS = 1024


@dataclass(frozen=True)
class Ablation:
    """Per sequence ``[pos]`` float64 arrays: the ``clean`` and ``ablated`` next-token losses (NaN for a hidden-state
    change, and at a sequence's last token) and their ``change``; which ``measure`` they are (:data:`NEXT_TOKEN_LOSS`
    or :data:`HIDDEN_STATE_CHANGE`), the ``heads`` ablated and how (``mode``; ``means``: each head's mean output,
    ``[d_value]``, in mean mode)."""

    measure: str
    clean: list[np.ndarray]
    ablated: list[np.ndarray]
    change: list[np.ndarray]
    heads: tuple[tuple[int, int], ...]
    mode: str
    means: dict[tuple[int, int], np.ndarray] | None = None


#: model -> (adapter, shape): a discovered adapter costs a probe pass, found once per model (a weak reference: a
#: model the user drops is freed)
_ADAPTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _adapter(model: torch.nn.Module) -> tuple[FamilyAdapter, ModelShape]:
    from qkviz.extraction.adapters import model_adapter

    known = _ADAPTERS.get(model)
    if known is None:
        adapter = model_adapter(model)
        known = _ADAPTERS[model] = (adapter, adapter.shape(model.config))
    if not known[0].has_output_projection:
        raise QkvizError(f"{known[0].family}: its attention's output projection is not known, so a head cannot be "
                         "ablated")
    return known[0], known[1]


def checked_heads(heads, shape: ModelShape) -> tuple[tuple[int, int], ...]:
    """``heads`` (a ``(layer, head)`` pair or a list of pairs) as sorted distinct pairs, each in range, or one line."""
    pairs = [heads] if len(heads) == 2 and all(isinstance(v, (int, np.integer)) for v in heads) else list(heads)
    checked = set()
    for pair in pairs:
        if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair):
            raise QkvizError(f"a head is a (layer, head) pair of whole numbers, got {pair!r}")
        layer, head = int(pair[0]), int(pair[1])
        if not (0 <= layer < shape.n_layers and 0 <= head < shape.n_heads):
            raise QkvizError(f"head ({layer}, {head}) is outside the model's {shape.n_layers} layers x "
                             f"{shape.n_heads} heads")
        checked.add((layer, head))
    if not checked:
        raise QkvizError("give at least one (layer, head) to ablate")
    return tuple(sorted(checked))


class _HeadOutputs:
    """Forward pre-hooks on the output projections of the heads' layers: they add up each head's output over the real
    tokens (:attr:`collect`) and replace it (:attr:`replace`: ``{(layer, head): vector [d_value]}``) while on."""

    def __init__(self, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, heads):
        self._projections = adapter.output_projections(model)
        self._heads, self._n_heads = heads, shape.n_heads
        self.mask: torch.Tensor | None = None          # [batch, pos] real tokens of the batch running
        self.collect = False
        self.sums: dict[tuple[int, int], torch.Tensor] = {}
        self.count = 0
        self.replace: dict[tuple[int, int], torch.Tensor] | None = None
        self._handles = []

    def __enter__(self) -> "_HeadOutputs":
        layer_of = LayerCalls(self._projections).counter()   # a shared module (ALBERT) is each layer in turn
        for projection in {id(p): p for p in self._projections}.values():
            self._handles.append(projection.register_forward_pre_hook(self._hook(layer_of)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, layer_of):
        def hook(_projection, args):
            layer = layer_of(_projection)
            heads = [head for l_, head in self._heads if l_ == layer]
            if not heads:
                return None
            outputs = args[0]                                              # [batch, pos, heads x d_value]
            if outputs.shape[-1] % self._n_heads:
                raise QkvizError(f"layer {layer}'s output projection reads {outputs.shape[-1]} values, not a "
                                 f"multiple of its {self._n_heads} heads: a head cannot be ablated there")
            split = outputs.reshape(*outputs.shape[:-1], self._n_heads, -1)
            if self.collect:
                real = self.mask[..., None].to(torch.float64)
                for head in heads:
                    total = (split[..., head, :].to(torch.float64) * real).sum(dim=(0, 1))
                    self.sums[(layer, head)] = self.sums.get((layer, head), 0) + total
            if self.replace is None:
                return None
            split = split.clone()
            for head in heads:
                split[..., head, :] = self.replace[(layer, head)].to(split.dtype)
            return (split.reshape(outputs.shape), *args[1:])
        return hook


def _batches(sequences: list[np.ndarray]) -> list[list[int]]:
    """Indices of ``sequences``, longest first, in batches of at most :data:`BATCH_TOKENS` padded tokens (or one)."""
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    batches, start = [], 0
    while start < len(order):
        size = max(1, BATCH_TOKENS // len(sequences[order[start]]))
        batches.append(order[start:start + size])
        start += size
    return batches


def _padded(batch: list[np.ndarray], device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids in batch)
    input_ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, ids in enumerate(batch):
        input_ids[row, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        mask[row, :len(ids)] = 1
    return input_ids.to(device), mask.to(device)


def predicts_next_token(model: torch.nn.Module, adapter: FamilyAdapter) -> bool:
    """Whether ``model`` is a causal model with its language-model head (else the hidden-state change is measured)."""
    head = getattr(model, "get_output_embeddings", lambda: None)()
    return bool(adapter.causal and head is not None)


def _measure(model: torch.nn.Module, input_ids: torch.Tensor, mask: torch.Tensor, next_token: bool) -> torch.Tensor:
    """Per token: the next-token loss ``[batch, pos]`` (NaN without a next token), or the last hidden state
    ``[batch, pos, d_model]``."""
    if not next_token:
        output = forward(getattr(model, "base_model", model), input_ids=input_ids, attention_mask=mask)
        hidden = getattr(output, "last_hidden_state", None)
        return (hidden if hidden is not None else output[0]).float()
    logits = forward(model, input_ids=input_ids, attention_mask=mask).logits
    losses = torch.full(input_ids.shape, float("nan"), dtype=torch.float32, device=input_ids.device)
    has_next = mask[:, 1:].bool()
    # the real tokens' rows only, [tokens, vocabulary] and contiguous: the softmax runs along memory (a transposed
    # [batch, vocabulary, pos] view took 6 times as long on SmolLM2) and over no padding
    predicted = torch.nn.functional.cross_entropy(logits[:, :-1][has_next].float(), input_ids[:, 1:][has_next],
                                                  reduction="none")
    losses[:, :-1][has_next] = predicted
    return losses


def _check_sequences(sequences, model) -> list[np.ndarray]:
    vocabulary = getattr(model.config.get_text_config(), "vocab_size", None)
    checked = []
    for index, ids in enumerate(sequences):
        ids = np.array(ids, dtype=np.int64).reshape(-1)
        if not len(ids):
            raise QkvizError(f"sequence {index} is empty; every sequence needs at least one token id")
        if ids.min() < 0 or (vocabulary is not None and ids.max() >= vocabulary):
            raise QkvizError(f"sequence {index} has token ids outside the model's vocabulary (0..{vocabulary - 1})")
        checked.append(ids)
    if not checked:
        raise QkvizError("give at least one sequence of token ids to ablate on")
    return checked


def _given_clean(clean, sequences: list[np.ndarray]) -> list[np.ndarray] | None:
    if clean is None:
        return None
    clean = [np.asarray(values, dtype=np.float64) for values in clean]
    if len(clean) != len(sequences) or any(len(a) != len(ids) for a, ids in zip(clean, sequences)):
        raise QkvizError("clean= must be the clean losses of the same sequences (an earlier Ablation.clean)")
    return clean


def _given_means(mean, heads, d_value: int) -> dict[tuple[int, int], torch.Tensor]:
    """``mean`` (a vector for one head, or ``{(layer, head): vector}``) as float64 tensors, checked."""
    if not isinstance(mean, dict):
        if len(heads) != 1:
            raise QkvizError("mean= for several heads is a dict {(layer, head): vector}")
        mean = {heads[0]: mean}
    missing = [head for head in heads if head not in mean]
    if missing:
        raise QkvizError(f"mean= has no vector for head {missing[0]}")
    vectors = {head: torch.as_tensor(np.asarray(mean[head], dtype=np.float64)).reshape(-1) for head in heads}
    if any(len(vector) != d_value for vector in vectors.values()):
        raise QkvizError(f"mean= vectors must hold one value per dimension of a head's output ({d_value})")
    return vectors


def ablation_losses(model: torch.nn.Module, sequences, heads, mode: str = "zero", mean=None, *,
                    clean: list[np.ndarray] | None = None, progress: bool = False) -> Ablation:
    """``model`` run over ``sequences`` (lists or arrays of token ids, fed as they are) clean and with ``heads`` (a
    ``(layer, head)`` pair, or a list of pairs ablated together) ablated by ``mode`` (``"zero"`` or ``"mean"``; see
    the module): the per-token :class:`Ablation`. ``mean``: in mean mode, the heads' mean outputs to use (a
    ``[d_value]`` vector for one head, or ``{(layer, head): vector}``) instead of their mean over ``sequences``.
    ``clean``: the clean next-token losses of an earlier call over the same sequences (its :attr:`Ablation.clean`),
    which spares the clean pass when another head is ablated (ignored for a hidden-state change)."""
    if mode not in ABLATION_MODES:
        raise QkvizError(f"mode must be one of {', '.join(ABLATION_MODES)}, got {mode!r}")
    adapter, shape = _adapter(model)
    heads = checked_heads(heads, shape)
    sequences = _check_sequences(sequences, model)
    next_token = predicts_next_token(model, adapter)
    device = next(model.parameters()).device
    batches = _batches(sequences)
    n_tokens = sum(len(ids) for ids in sequences)
    passes = 3 if mode == "mean" and mean is None and not next_token else 2
    clean = _given_clean(clean, sequences) if next_token else None
    if clean is None:
        clean = [None] * len(sequences)
    elif mode == "zero" or mean is not None:
        passes = 1
    change: list = [None] * len(sequences)
    ablated: list = [None] * len(sequences)
    bar = _bar(progress, n_tokens * passes)
    with torch.inference_mode(), _HeadOutputs(model, adapter, shape, heads) as hooks:
        if mode == "mean" and mean is None:
            means = _measured_means(model, hooks, batches, sequences, clean if next_token else None, bar)
        else:
            means = None if mode == "zero" else _given_means(mean, heads, shape.value_dim or shape.head_dim)
        hooks.replace = {head: (torch.zeros(1, dtype=torch.float64) if means is None else means[head]).to(device)
                         for head in heads}
        for batch in batches:
            input_ids, mask = _padded([sequences[i] for i in batch], device)
            replace, hooks.replace = hooks.replace, None
            reference = None
            if not next_token or clean[batch[0]] is None:
                reference = _measure(model, input_ids, mask, next_token)
                bar.update(int(mask.sum()))
            hooks.replace = replace
            measured = _measure(model, input_ids, mask, next_token)
            bar.update(int(mask.sum()))
            if next_token:
                if reference is not None:
                    _keep(clean, batch, sequences, reference)
                _keep(ablated, batch, sequences, measured)
            else:
                relative = (measured - reference).norm(dim=-1) / reference.norm(dim=-1).clamp_min(1e-12)
                _keep(change, batch, sequences, relative)
    bar.close()
    if next_token:
        change = [after - before for before, after in zip(clean, ablated)]
    else:
        clean = [np.full(len(ids), np.nan) for ids in sequences]
        ablated = [np.full(len(ids), np.nan) for ids in sequences]
    kept_means = None if means is None else {head: means[head].cpu().numpy() for head in heads}
    return Ablation(NEXT_TOKEN_LOSS if next_token else HIDDEN_STATE_CHANGE, clean, ablated, change, heads, mode,
                    kept_means)


def _measured_means(model, hooks: _HeadOutputs, batches, sequences, clean: list | None, bar) -> dict:
    """The heads' mean outputs over the real tokens of ``sequences``, from a clean pass (which fills ``clean``, the
    next-token losses, when given)."""
    device = next(model.parameters()).device
    hooks.collect = True
    for batch in batches:
        input_ids, mask = _padded([sequences[i] for i in batch], device)
        hooks.mask = mask
        measured = _measure(model, input_ids, mask, clean is not None)
        if clean is not None:
            _keep(clean, batch, sequences, measured)
        bar.update(int(mask.sum()))
    hooks.collect = False
    n_tokens = sum(len(ids) for ids in sequences)
    return {head: total / n_tokens for head, total in hooks.sums.items()}


def _keep(into: list, batch: list[int], sequences: list[np.ndarray], values: torch.Tensor) -> None:
    for row, index in enumerate(batch):
        into[index] = values[row, :len(sequences[index])].to(torch.float64).cpu().numpy()


def _bar(progress: bool, total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="ablating", unit="token", disable=not progress)
