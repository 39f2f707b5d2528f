"""Capture queries and keys where a family's own code computes attention, at the product of queries and keys.

Older families (Falcon, XGLM, the BERT-style encoders written before transformers' attention interface: Megatron-BERT,
RemBERT, RoFormer, ...) do not call the interface (:mod:`qkviz.extraction.capture.recorder`): their attention module multiplies
queries by keys itself (``torch.matmul``, ``@``, ``torch.bmm`` or ``torch.baddbmm``), softmaxes, and multiplies the
probabilities by the values. Their code differs in everything around those two products (fused projections, rotary
inside the module, where the scale is applied, ``[batch x head, pos, d]`` or ``[batch, head, pos, d]``), and it
moves between transformers releases; the two products do not. So qkviz runs such a model with its own eager code
and, while each declared attention module runs, watches its tensor operations (a ``TorchFunctionMode``): the first
product whose result is ``[batch x heads, queries, keys]`` gives the queries and keys exactly as they enter the
dot product (after every projection, bias and rotation), the next product of those probabilities gives the values.

What the watch cannot see is declared per attention class in the family's declaration (:data:`OWN_CODE_CAPTURES`,
read from :mod:`qkviz.extraction.families`): the head count, the scale
the family applies to ``q . k``, whether it applied it to the queries before the product (XGLM, XLM: stored queries
are taken before the scale, as everywhere in qkviz), and whether the keys were broadcast to every query head
(Falcon's new architecture: kept once per key-value head). A declared module whose code no longer computes the
products this way captures nothing, and the model is refused as one whose attention qkviz cannot reach; a module
whose code adds a term the products do not carry (a position bias) is refused by the exactness gate. A module whose
code reads the hidden states of padding (ConvBERT's span convolution, beside its q.k heads) is declared too: its
sentences pass one at a time, unpadded (:func:`passes_alone`), so that each one's vectors are its own.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

from qkviz.extraction.families import OwnCodeCapture, declared_captures

#: ``record(module, query, key, value, scaling, kwargs)``, as :class:`qkviz.extraction.capture.recorder.AttentionRecorder`
Record = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, float, dict], None]

#: the products of two tensors a family's own attention code computes ``q . k`` and ``p . v`` with
_PRODUCTS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm}
#: ``baddbmm(input, a, b)``: the product is of the second and third arguments
_ADDED_PRODUCTS = {torch.baddbmm, torch.Tensor.baddbmm}
#: ``scaled_dot_product_attention(query, key, value)``, which a family may call where its configuration asks for it
_FUSED = {torch.nn.functional.scaled_dot_product_attention}


#: ``"<module file>.<attention class>"`` -> what its own code does beyond the two products (declared exceptions to
#: the attention interface, each in its family's declaration: :mod:`qkviz.extraction.families`; the method captures
#: of :data:`qkviz.extraction.capture.recorder.METHOD_CAPTURES` are the other)
OWN_CODE_CAPTURES: dict[str, OwnCodeCapture] = declared_captures(OwnCodeCapture)


def declared_capture(module: torch.nn.Module) -> OwnCodeCapture | None:
    """The declaration for ``module``'s class, or None."""
    cls = type(module)
    return OWN_CODE_CAPTURES.get(f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}")


def own_code_modules(model: torch.nn.Module) -> list[tuple[torch.nn.Module, OwnCodeCapture]]:
    """Every module of ``model`` whose class is declared in :data:`OWN_CODE_CAPTURES`."""
    return [(module, declared) for module in model.modules() if (declared := declared_capture(module)) is not None]


def passes_alone(model: torch.nn.Module) -> bool:
    """Whether every sentence must pass through ``model`` alone, in a batch of one with no padding: an attention
    module's own code reads the padding beside a sentence (:attr:`OwnCodeCapture.reads_padding`), so that in a
    padded batch its vectors would depend on the sentences beside it."""
    return any(declared.reads_padding for _, declared in own_code_modules(model))


class _ProductWatch(TorchFunctionMode):
    """While one call of one attention module lasts: finds its ``q . k`` and ``p . v`` products and records them."""

    def __init__(self, module: torch.nn.Module, declared: OwnCodeCapture, config, record: Record,
                 batch: int, n_queries: int):
        super().__init__()
        self.module, self.declared, self.config, self.record = module, declared, config, record
        self.heads = int(declared.heads(module))
        self.batch, self.n_queries = batch, n_queries
        self.scores: tuple[torch.Tensor, torch.Tensor] | None = None
        self.done = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.done:
            if func in _PRODUCTS and len(args) >= 2:
                self._see(args[0], args[1])
            elif func in _ADDED_PRODUCTS and len(args) >= 3:
                self._see(args[1], args[2])
            elif (func in _FUSED and len(args) >= 3 and isinstance(args[1], torch.Tensor)
                  and self._multiplies(args[0], args[1].transpose(-1, -2))):
                self.done = True
                self._record(args[0], args[1], args[2])
        return func(*args, **kwargs)

    def _rows(self, tensor: torch.Tensor) -> int:
        return math.prod(tensor.shape[:-2])

    def _multiplies(self, left, right) -> bool:
        """Whether ``left @ right`` is a product over this call's queries, per head: ``[batch x heads, queries, .]``."""
        return (isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor) and left.dim() in (3, 4)
                and right.dim() == left.dim() and left.shape[-1] == right.shape[-2]
                and left.shape[-2] == self.n_queries and self._rows(left) == self.batch * self.heads)

    def _see(self, left, right) -> None:
        if not self._multiplies(left, right):
            return
        if self.scores is None:
            self.scores = (left, right.transpose(-1, -2))
        elif left.shape[-1] == self.scores[1].shape[-2]:            # probabilities [.., queries, keys] . values
            self.done = True
            self._record(*self.scores, right)

    def _per_head(self, tensor: torch.Tensor) -> torch.Tensor:
        """``[batch x head, pos, d]`` or ``[batch, head, pos, d]`` -> ``[batch, head, pos, d]``."""
        return tensor.reshape(self.batch, -1, *tensor.shape[-2:])

    def _record(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        declared = self.declared
        scaling = float(declared.scaling(self.module))
        query, key, value = (self._per_head(tensor) for tensor in (query, key, value))
        if declared.query_scaled:
            query = query / scaling
        if declared.key_heads is not None:
            step = max(1, key.shape[1] // int(declared.key_heads(self.module)))
            key, value = key[:, ::step], value[:, ::step]
        causal = bool(declared.causal(self.module, self.config))
        self.record(self.module, query, key, value, scaling, {"is_causal": causal})


def _hidden_states(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """What an attention module's queries come from: its first argument (every declared class takes it first)."""
    if isinstance(kwargs.get("hidden_states"), torch.Tensor):
        return kwargs["hidden_states"]
    return next((value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor)), None)


def _watched_forward(module: torch.nn.Module, declared: OwnCodeCapture, config, record: Record):
    original = module.forward

    def forward(*args, **kwargs):
        hidden = _hidden_states(args, kwargs)               # [batch, pos, d_model]
        if hidden is None or hidden.dim() != 3:
            return original(*args, **kwargs)
        with _ProductWatch(module, declared, config, record, hidden.shape[0], hidden.shape[1]):
            return original(*args, **kwargs)

    return forward


@contextlib.contextmanager
def capturing_own_code(modules: list[tuple[torch.nn.Module, OwnCodeCapture]], config, record: Record
                       ) -> Iterator[None]:
    """The ``modules`` (:func:`own_code_modules`) hand what enters their products to ``record`` while the context
    lasts."""
    replaced = [(module, module.__dict__.get("forward")) for module, _ in modules]   # a wrapper of its own (accelerate)
    for module, declared in modules:
        module.forward = _watched_forward(module, declared, config, record)
    try:
        yield
    finally:
        for module, previous in replaced:
            if previous is None:
                del module.forward
            else:
                module.forward = previous
