"""One declaration per model type: everything qkviz knows of a family, in one record.

A :class:`FamilyDeclaration` holds a model type's status (exact, or refused and why) as the families table says it,
why a model of the type is refused before its weights load, whether ``Run.explain`` splits its logits, the adapter
it needs where its structure cannot tell (BERT-layout encoders, DistilBERT, GPT-2, the image families), how its
queries and keys are captured where it does not call transformers' attention interface (the capture kinds below,
each keyed by the attention class it applies to), and whether a checkpoint of the type is read through its vision
tower. A family qkviz has no declaration for is found from its structure and passes the exactness gate or is refused
by it.

The declarations sit in one module per kind of family (:mod:`~qkviz.extraction.families.encoders`,
:mod:`~qkviz.extraction.families.decoders`, :mod:`~qkviz.extraction.families.rotary_decoders`,
:mod:`~qkviz.extraction.families.vision`); everything else is read from them
(:mod:`~qkviz.extraction.families.catalogue`). Plain Python: torch only in annotations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Union

from qkviz.extraction.families.adapter import FamilyAdapter

if TYPE_CHECKING:
    import torch

EXACT = "exact"
REFUSED = "refused"

#: what a refusal of a term in the logit adds to the term
INEXPRESSIBLE = ", which q.k cannot express"


@dataclass(frozen=True)
class MethodCapture:
    """A family that computes attention in a method of its own instead of calling the attention interface: the
    method, which receives ``(query, key, value, attention_mask)`` after every rotation and before the scale (or,
    with ``returns_qkv``, returns ``(query, key, value)``: it splits them off a fused projection), and what it
    applies beyond ``q . k`` (``scaling``, ``is_causal``, ``sliding_window``, ``alibi_slopes``), read from the
    module. Keyed by the attention class's name (``"GPTJAttention"``)."""

    method: str
    settings: Callable[[torch.nn.Module], dict]
    returns_qkv: bool = False


@dataclass(frozen=True)
class ProjectionCapture:
    """A family whose attention's forward makes its queries and keys from one fused projection and computes
    attention inline, with no method that receives or returns them: the projection (a child module), how the
    forward splits its output into ``(query, key, value)`` ``[batch, head, pos, d_head]``, and what the attention
    applies beyond ``q . k``, read from the module. The split repeats a few lines of the family's code; the
    exactness gate checks it against the model's own attention. Keyed by the attention class's name."""

    projection: str
    split: Callable[[torch.nn.Module, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    settings: Callable[[torch.nn.Module], dict]


@dataclass(frozen=True)
class OwnCodeCapture:
    """What qkviz needs to know about one attention class whose own code computes attention
    (:mod:`qkviz.extraction.capture.own_code_capture`). Keyed by ``"<module file>.<attention class>"``
    (``"modeling_falcon.FalconAttention"``)."""

    #: query heads of the module (to unfold a ``[batch x head, pos, d]`` product)
    heads: Callable[[torch.nn.Module], int]
    #: the scale the family applies to ``q . k``
    scaling: Callable[[torch.nn.Module], float]
    #: whether a query sees only the keys before it, from the module and the model's configuration
    causal: Callable[[torch.nn.Module, object], bool]
    #: the queries enter the product already multiplied by the scale (divided out again: qkviz stores them unscaled)
    query_scaled: bool = False
    #: key-value heads where the family broadcasts every key to the query heads it serves before the product
    key_heads: Callable[[torch.nn.Module], int] | None = None
    #: the module's own code reads the positions beside a sentence, padding included (ConvBERT's span convolution,
    #: which no mask reaches): a sentence's vectors are its own only where it passes alone
    #: (:func:`qkviz.extraction.capture.own_code_capture.passes_alone`)
    reads_padding: bool = False


@dataclass(frozen=True)
class AlibiInMask:
    """A family that passes its ALiBi bias to the attention interface inside the attention mask it gives every layer
    (Falcon with ``alibi=True``, from transformers 5.25): its queries and keys are the interface's, and its slopes are
    read from its own ``build_alibi_tensor`` (:func:`qkviz.extraction.capture.alibi_capture.mask_alibi_slopes`).
    Keyed by the attention class's name."""


Capture = Union[MethodCapture, ProjectionCapture, OwnCodeCapture, AlibiInMask]


@dataclass(frozen=True)
class FamilyDeclaration:
    """Everything qkviz knows of one model type (the module doc)."""

    model_type: str
    #: :data:`EXACT` or :data:`REFUSED`
    status: str
    #: exact: what its attention has beyond plain q.k (all recomputed); refused: why
    note: str = ""
    #: a row of the families table (``qkviz models``, docs/families.md), proven on a tiny random model of the type by
    #: ``tests/integration/models/test_model_families.py``; a declaration outside it holds a capture, an adapter or a refusal
    in_table: bool = True
    #: why a model of this type is refused before its weights load, where the type alone decides (one line)
    refusal: str | None = None
    #: where its configuration decides: a check returning why the model is refused, or None
    configuration_refusal: Callable[[object], str | None] | None = None
    #: why ``Run.explain`` and ``Run.circuit`` refuse to split its logits by the parts of the residual stream
    #: (:mod:`qkviz.extraction.residual.residual_parts`); None: split exactly
    attribution_refused: str | None = None
    #: where its structure cannot tell what qkviz needs; None: found from the model's structure
    adapter: FamilyAdapter | None = None
    #: attention class -> how its queries and keys are captured where it does not call the attention interface (each
    #: kind's doc says how it is keyed)
    captures: Mapping[str, Capture] = field(default_factory=dict)
    #: a checkpoint of this type holds a vision tower beside a text tower (``config.vision_config``,
    #: ``model.vision_model``): qkviz reads the tower
    vision_tower: bool = False


def exact(model_type: str, note: str = "", **declared) -> FamilyDeclaration:
    return FamilyDeclaration(model_type, EXACT, note, **declared)


def refused(model_type: str, why: str, **declared) -> FamilyDeclaration:
    """Refused by name before its weights load, in one line that says ``why``."""
    return FamilyDeclaration(model_type, REFUSED, why, refusal=why, **declared)


def refused_term(model_type: str, term: str, **declared) -> FamilyDeclaration:
    """Refused by name before its weights load: its attention adds ``term`` to the logit, which q.k cannot express."""
    return FamilyDeclaration(model_type, REFUSED, term, refusal=term + INEXPRESSIBLE, **declared)


def relative_positions(config) -> str | None:
    """Why a configuration that adds relative-position terms to the logit is refused (a BERT-layout encoder's
    ``position_embedding_type``), or None; every model type without a refusal of its own is checked for it."""
    kind = getattr(config, "position_embedding_type", "absolute") or "absolute"
    if kind not in ("absolute", "rope", "rotary"):
        return (f"position_embedding_type={kind!r} adds relative-position terms to the attention logit; "
                "only 'absolute' can be reproduced from queries and keys")
    return None


def head_size_scale(attribute: str) -> Callable[[torch.nn.Module], float]:
    """``1 / sqrt(module.<attribute>)``: the scale of a family that divides ``q . k`` by the root of its head size."""
    return lambda module: 1.0 / math.sqrt(getattr(module, attribute))


def _decoder(module: torch.nn.Module, config) -> bool:
    return bool(getattr(module, "is_decoder", False))


#: BERT's self-attention as the families written before the attention interface copy it: ``query`` / ``key`` /
#: ``value`` projections, ``q . k / sqrt(attention_head_size)``, causal only as a decoder
BERT_SELF_ATTENTION = OwnCodeCapture(heads=lambda module: module.num_attention_heads,
                                     scaling=head_size_scale("attention_head_size"), causal=_decoder)
