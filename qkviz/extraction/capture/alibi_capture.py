"""ALiBi through the attention mask: the slopes a family adds to the mask it passes the attention interface.

ALiBi (Press et al., 2022) adds ``slope_h * (j - i)`` to head ``h``'s logit from query ``i`` to key ``j``, a bias
``q . k`` cannot express, so the run stores each head's slope (``attention.alibi_slopes``) and every recomputation
adds it back (:class:`qkviz.core.logit_rule.LogitRule`). BLOOM and MPT compute attention in code of their own, where
their declarations capture queries, keys and slopes together (:mod:`qkviz.extraction.families.decoders`).

Falcon with ``alibi=True`` calls transformers' attention interface from release 5.25 on (:func:`mask_alibi_slopes`;
its declaration names its attention class, :class:`qkviz.extraction.families.AlibiInMask`): its model adds
``slope_h * j / sqrt(d_head)`` to the mask it passes every layer, so the queries and keys are the interface's, and
only the slopes are read here. Falcon computes ``slope_h * j`` in bfloat16: where that product needs more than
bfloat16's 8 significant bits (a slope that is not a power of two, or a position past 256) the model's bias is no
longer a slope per head times the distance, and the model is refused in one line that says by how much, at the
length where it happens (:class:`RoundedAlibi`). A Falcon with 2, 4, 8, ... heads has power-of-two slopes and is
exact up to 256 tokens a sequence; Falcon-RW's 32 heads have slopes ``2^(-k/4)``, most of them not.
"""

from __future__ import annotations

import functools
import math
import sys

import torch

from qkviz.core.errors import QkvizError
from qkviz.extraction.families import AlibiInMask, declared_captures

#: the attention classes whose model passes its ALiBi bias in the attention mask (their families' declarations)
MASK_ALIBI_CLASSES = frozenset(declared_captures(AlibiInMask))
#: how far (in logits, relative to the largest bias) a model's ALiBi bias may be from ``slope * position``
ALIBI_LINEAR_TOLERANCE = 1e-6


class RoundedAlibi(QkvizError):
    """A model's ALiBi bias is not a slope per head times the position (Falcon's bfloat16 product)."""


def mask_alibi_slopes(module: torch.nn.Module, n_keys: int = 2) -> torch.Tensor | None:
    """``[head]`` float32: the ALiBi slopes a model adds through the attention mask it passes the attention
    interface (Falcon with ``alibi=True``, transformers >= 5.25: ``build_alibi_tensor(...) / sqrt(d_head)``), or
    None for every other attention module. The slopes are the family's own function, divided as its model divides
    them; over the ``n_keys`` positions of this call its bias must be ``slope * position``, else
    :class:`RoundedAlibi` says by how much it is not. Worked out once per shape (every layer of every batch asks)."""
    config = getattr(module, "config", None)
    if type(module).__name__ not in MASK_ALIBI_CLASSES or not getattr(config, "alibi", False):
        return None
    slopes = _linear_alibi_slopes(type(module).__module__, module.num_heads, max(int(n_keys), 2),
                                  config.hidden_size // module.num_heads)
    return torch.tensor(slopes, dtype=torch.float32)


@functools.lru_cache(maxsize=64)
def _linear_alibi_slopes(family: str, heads: int, n_keys: int, head_dim: int) -> tuple[float, ...]:
    """:func:`mask_alibi_slopes` for one family module, head count, key count and head size."""
    bias = sys.modules[family].build_alibi_tensor(torch.ones(1, n_keys, dtype=torch.long), heads, torch.float32)
    bias = bias.reshape(heads, n_keys).double() / math.sqrt(head_dim)
    slopes = bias[:, 1] - bias[:, 0]
    departure = float((bias - slopes[:, None] * torch.arange(n_keys, dtype=torch.float64)).abs().max())
    if departure > ALIBI_LINEAR_TOLERANCE * max(1.0, float(bias.abs().max())):
        raise RoundedAlibi(f"Falcon with alibi=True rounds slope x position to bfloat16, so over {n_keys} positions its "
                           f"ALiBi bias departs from a slope per head by up to {departure:.2g} logits (slopes that are "
                           "not powers of two, or positions past 256), which q.k and one slope per head cannot express")
    return tuple(float(slope) for slope in slopes.float())
