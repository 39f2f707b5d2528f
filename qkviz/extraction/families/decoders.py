"""The decoders with learned, ALiBi or no positions qkviz knows, one declaration per model type (Falcon, rotary or
ALiBi, among them, as in the table).

GPT-2 keeps an adapter for its fused ``Conv1D`` projection; XGLM, OpenAI GPT and GIT's text decoder are captured
where their own code multiplies queries by keys. The ALiBi families: ALiBi (Press et al., 2022) adds
``slope_h * (j - i)`` to head ``h``'s logit from query ``i`` to key ``j``, a bias ``q . k`` cannot express, so the run
stores each head's slope (``attention.alibi_slopes``) and every recomputation adds it back
(:class:`qkviz.core.logit_rule.LogitRule`). BLOOM adds ``slope_h * j`` (positions counted from a sequence's first
real token) and MPT ``slope_h * (j - n + 1)``: a constant per query away from ``slope_h * (j - i)``, the same
probabilities, both after the ``1 / sqrt(d_head)`` scale. Their slopes come from the family's own function for them,
called on two positions (so a release that changes them changes what is stored), and their queries and keys from the
method that splits them off the fused projection, as they enter ``q . k``; the exactness gate then checks both
against the model's own attention. Falcon with ``alibi=True`` passes its bias in the attention mask from transformers
5.25 on (:class:`~qkviz.extraction.families.declaration.AlibiInMask`; before, it is refused for the release).
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from qkviz.extraction.families.adapter import EmbeddingPaths, FamilyAdapter
from qkviz.extraction.families.declaration import (BERT_SELF_ATTENTION, AlibiInMask, MethodCapture, OwnCodeCapture,
                                                   ProjectionCapture, exact, head_size_scale, refused_term)

if TYPE_CHECKING:
    import torch

#: GPT-2: causal decoder with one fused ``c_attn`` projection split into query, key and value. The model splits
#: ``c_attn`` itself before calling the attention interface, so the captured queries and keys are already per head;
#: ``scale_attn_by_inverse_layer_idx`` is part of the scale the model passes and is recorded per layer.
GPT2 = FamilyAdapter(
    family="gpt2",
    model_types=(),         # those of the declarations that name it (the catalogue)
    architectures=("GPT2Model", "GPT2LMHeadModel"),
    layers_path="h",
    attention_path="attn",
    causal=True,
    output_projection_path="attn.c_proj",
    fused_projection_path="c_attn",
    conv1d_output=True,
    # GPT-2 adds wte and wpe; its first block normalises the sum (ln_1) before attention.
    embeddings=EmbeddingPaths("wte", "wpe", None, "h.0.ln_1"),
    description="GPT-2 decoders (fused c_attn, learned absolute positions)",
)


def bloom_slopes(module: torch.nn.Module) -> torch.Tensor:
    """``[head]`` float32: the slopes BLOOM's attention ``module`` is given, from its own ``build_alibi_tensor``
    over two positions (``slope * [0, 1]``)."""
    import torch        # here, so that the declarations import without torch

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


#: the first transformers release whose Falcon with ``alibi=True`` qkviz captures: it passes its ALiBi bias to the
#: attention interface in the mask, once, and its eager and SDPA attention agree (a tiny 4-head Falcon's last hidden
#: state: 7e-7 apart, against 0.14 on 5.23); the exactness gate proves every such run
FALCON_ALIBI_EXACT_FROM = "5.25.0"
#: the refusal of Falcon with ``alibi=True`` before :data:`FALCON_ALIBI_EXACT_FROM` (not a row of the table: a
#: configuration of the falcon type)
FALCON_ALIBI = ("Falcon with alibi=True: transformers' eager attention adds its ALiBi bias twice (to the logits and "
                "again in the mask) and SDPA once, so the model has no one attention to reproduce")


def _falcon_alibi(config) -> str | None:
    """Falcon with ALiBi on a release before :data:`FALCON_ALIBI_EXACT_FROM` (from it on, the exactness gate decides)."""
    import transformers
    from packaging.version import Version

    if not getattr(config, "alibi", False) or Version(transformers.__version__) >= Version(FALCON_ALIBI_EXACT_FROM):
        return None
    return f"{FALCON_ALIBI} (transformers {transformers.__version__}; exact from {FALCON_ALIBI_EXACT_FROM} on)"


def _falcon_key_heads(module: torch.nn.Module) -> int:
    return module.config.num_kv_heads if module.new_decoder_architecture else module.num_kv_heads


DECLARATIONS = (
    exact("gpt2", "fused Conv1D projection, layer-dependent scale", adapter=GPT2),
    exact("gpt_bigcode", "multi-query attention"),
    exact("opt"),
    exact("biogpt", "scaled embeddings"),
    exact("xglm", "queries scaled before the product (captured where its own code multiplies queries by keys)",
          captures={"modeling_xglm.XGLMAttention": OwnCodeCapture(
              heads=lambda module: module.num_heads, scaling=lambda module: float(module.scaling),
              causal=lambda module, config: True, query_scaled=True)}),
    # BLOOM splits queries, keys and values off its fused projection in _reshape, and adds ALiBi to their logits
    exact("bloom", "ALiBi (a slope per head, stored with the run); fused QKV projection (captured in its own "
                   "_reshape)",
          captures={"BloomAttention": MethodCapture("_reshape", bloom_settings, returns_qkv=True)}),
    exact("mpt", "ALiBi (a slope per head, stored with the run); fused QKV projection (split as its own forward "
                 "does)",
          captures={"MptAttention": ProjectionCapture("Wqkv", mpt_split, mpt_settings)}),
    exact("falcon", "rotary, grouped keys broadcast to every head (before transformers 5.25 captured where its "
                    "own code multiplies queries by keys; from 5.25 through the attention interface); alibi=True: "
                    f"exact from transformers {FALCON_ALIBI_EXACT_FROM} (a slope per head stored with the run, "
                    "where its bfloat16 bias is one), refused on earlier releases",
          configuration_refusal=_falcon_alibi,
          captures={"modeling_falcon.FalconAttention": OwnCodeCapture(
                        heads=lambda module: module.num_heads, scaling=head_size_scale("head_dim"),
                        causal=lambda module, config: True, key_heads=_falcon_key_heads),
                    "FalconAttention": AlibiInMask()}),
    # attention computed by the family's own code, captured where it multiplies queries by keys
    exact("openai-gpt", "learned positions, scaled or unscaled logits (its own code)", in_table=False,
          captures={"modeling_openai.Attention": OwnCodeCapture(
              heads=lambda module: module.n_head,
              scaling=lambda module: 1.0 / math.sqrt(module.split_size // module.n_head) if module.scale else 1.0,
              causal=lambda module, config: True)}),
    # GIT's text decoder: BERT's layout, causal over text (image tokens, which text extraction does not pass, aside)
    exact("git", "its text decoder: BERT's self-attention in its own code, causal", in_table=False,
          captures={"modeling_git.GitSelfAttention": replace(BERT_SELF_ATTENTION, causal=lambda module, config: True)}),
    refused_term("cpmant", "CPM-Ant adds a learned segment and relative-position bias to every attention logit",
                 in_table=False),
)
