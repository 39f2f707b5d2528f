"""ALiBi families that compute attention in their own code: what qkviz captures there and the slopes it stores.

ALiBi (Press et al., 2022) adds ``slope_h * (j - i)`` to head ``h``'s logit from query ``i`` to key ``j``, a bias
``q . k`` cannot express, so the run stores each head's slope (``attention.alibi_slopes``) and every recomputation
adds it back (:class:`qkviz.core.logit_rule.LogitRule`). The models add ``slope_h * j`` (BLOOM, positions counted
from a sequence's first real token) or ``slope_h * (j - n + 1)`` (MPT): a constant per query away from
``slope_h * (j - i)``, the same probabilities. Both add it after the ``1 / sqrt(d_head)`` scale.

The slopes come from the family's own function for them, called on two positions (so a release that changes them
changes what is stored), and the queries and keys from the method that splits them off the fused projection, as
they enter ``q . k``; the exactness gate then checks both against the model's own attention.
"""

from __future__ import annotations

import sys

import torch


def bloom_slopes(module: torch.nn.Module) -> torch.Tensor:
    """``[head]`` float32: the slopes BLOOM's attention ``module`` is given, from its own ``build_alibi_tensor``
    over two positions (``slope * [0, 1]``)."""
    family = sys.modules[type(module).__module__]
    alibi = family.build_alibi_tensor(torch.ones(1, 2), module.num_heads, torch.float32)    # [head, 1, 2]
    return alibi[:, 0, 1] - alibi[:, 0, 0]


def bloom_settings(module: torch.nn.Module) -> dict:
    """What BLOOM's attention applies beyond ``q . k`` (``alibi.baddbmm(q, k, beta=1, alpha=1 / sqrt(d_head))``):
    the scale, the causal mask and its ALiBi slopes."""
    if float(getattr(module, "beta", 1.0)) != 1.0:
        raise RuntimeError(f"BLOOM attention with beta={module.beta} scales its ALiBi bias, which qkviz does not store")
    return {"scaling": float(module.inv_norm_factor), "is_causal": True, "alibi_slopes": bloom_slopes(module)}


def mpt_slopes(module: torch.nn.Module) -> torch.Tensor:
    """``[head]`` float32: the slopes MPT's attention ``module`` is given, from its own ``build_mpt_alibi_tensor``
    over two positions (``slope * [-1, 0]``) with the arguments ``MptModel`` passes (the default bias maximum)."""
    family = sys.modules[type(module).__module__]
    alibi = family.build_mpt_alibi_tensor(module.n_heads, 2)                                 # [head, 1, 2]
    return (alibi[:, 0, 1] - alibi[:, 0, 0]).float()


def mpt_settings(module: torch.nn.Module) -> dict:
    """What MPT's attention applies beyond ``q . k``: its ``softmax_scale``, the causal mask and its ALiBi slopes."""
    return {"scaling": float(module.softmax_scale), "is_causal": True, "alibi_slopes": mpt_slopes(module)}


def mpt_split(module: torch.nn.Module, fused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MPT's queries, keys and values ``[batch, head, pos, d_head]`` from the output of its fused projection
    ``Wqkv``, as its attention's forward makes them (clipped to ``clip_qkv``, split in three, one head each)."""
    if module.clip_qkv:
        fused = fused.clamp(min=-module.clip_qkv, max=module.clip_qkv)
    batch, length = fused.shape[:2]
    return tuple(part.reshape(batch, length, module.n_heads, module.head_dim).transpose(1, 2)
                 for part in fused.chunk(3, dim=2))
