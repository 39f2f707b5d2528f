"""The model types qkviz has been tried on, each exact or refused, and why: the table behind ``qkviz models`` and
docs/families.md.

Plain Python (no torch). Every row is proven by ``tests/integration/test_model_families.py`` on a tiny random
model of that type: an exact one by recomputing the model's own eager attention from the stored queries and
keys, a refused one by the one-line refusal quoted here. A model type not listed is not refused for that: it is
found from its structure and passes the exactness gate or is refused by it.
"""

from __future__ import annotations

from dataclasses import dataclass

EXACT = "exact"
REFUSED = "refused"

#: the refusal of a family whose attention does not go through transformers' attention interface
OWN_CODE = "no layer calls transformers' attention interface (its attention is computed by its own code)"
#: the refusal of a model with no attention at all
NO_ATTENTION = "no attention layer at all (a state-space or recurrent model)"
#: the refusal of a family whose attention module computes several attentions each time it runs
SEVERAL_PER_LAYER = "one attention module calls attention several times each time it runs (several attentions per layer)"
#: the first transformers release whose Falcon with ``alibi=True`` qkviz captures: it passes its ALiBi bias to the
#: attention interface in the mask, once, and its eager and SDPA attention agree (a tiny 4-head Falcon's last hidden
#: state: 7e-7 apart, against 0.14 on 5.23); the exactness gate proves every such run
FALCON_ALIBI_EXACT_FROM = "5.25.0"
#: the refusal of Falcon with ``alibi=True`` before :data:`FALCON_ALIBI_EXACT_FROM` (not a row of the table: a
#: configuration of the falcon type)
FALCON_ALIBI = ("Falcon with alibi=True: transformers' eager attention adds its ALiBi bias twice (to the logits and "
                "again in the mask) and SDPA once, so the model has no one attention to reproduce")
DEBERTA = "DeBERTa adds disentangled relative-position terms (content-to-position, position-to-content) to every logit"
MPNET = "MPNet adds a learned relative-position bias to every attention logit"
#: the refusal of Perceiver (not a row of the table: a family no issue names)
LATENT_ATTENTION = ("Perceiver attends from a fixed set of learned latent vectors to the tokens and among the latents, "
                    "never from a token to a token: no token has both a query and a key")
#: the refusal of a model whose forward pass reads something else than token ids (Whisper's speech encoder-decoder)
OTHER_INPUTS = "reads {reads}, not the token ids qkviz passes"


@dataclass(frozen=True)
class ModelFamily:
    model_type: str
    status: str
    #: exact: what its attention has beyond plain q.k (all recomputed); refused: why
    note: str


def _exact(model_type: str, note: str = "") -> ModelFamily:
    return ModelFamily(model_type, EXACT, note)


def _refused(model_type: str, why: str) -> ModelFamily:
    return ModelFamily(model_type, REFUSED, why)


MODEL_FAMILIES: tuple[ModelFamily, ...] = (
    # encoders
    _exact("bert", "query/key biases, absolute positions"),
    _exact("roberta", "positions offset by the padding index"),
    _exact("xlm-roberta", "as RoBERTa"),
    _exact("camembert", "as RoBERTa"),
    _exact("distilbert"),
    _exact("electra", "embedding projection before the encoder"),
    _exact("modernbert", "local (sliding-window, both sides) / global layers, rotary"),
    _exact("albert", "one layer shared by every layer: captured once per call, the run's layer i is its i-th call"),
    _refused("mpnet", MPNET),
    _refused("deberta", DEBERTA),
    _refused("deberta-v2", DEBERTA),
    # decoders with learned or no positions
    _exact("gpt2", "fused Conv1D projection, layer-dependent scale"),
    _exact("gpt_bigcode", "multi-query attention"),
    _exact("opt"),
    _exact("biogpt", "scaled embeddings"),
    _exact("xglm", "queries scaled before the product (captured where its own code multiplies queries by keys)"),
    _exact("bloom", "ALiBi (a slope per head, stored with the run); fused QKV projection (captured in its own "
                    "_reshape)"),
    _exact("mpt", "ALiBi (a slope per head, stored with the run); fused QKV projection (split as its own forward "
                  "does)"),
    _exact("falcon", "rotary, grouped keys broadcast to every head (before transformers 5.25 captured where its "
                     "own code multiplies queries by keys; from 5.25 through the attention interface); alibi=True: "
                     f"exact from transformers {FALCON_ALIBI_EXACT_FROM} (a slope per head stored with the run, "
                     "where its bfloat16 bias is one), refused on earlier releases"),
    # rotary decoders
    _exact("llama", "grouped-query"),
    _exact("mistral", "sliding window"),
    _exact("ministral", "sliding-window / full layers"),
    _exact("mixtral", "mixture-of-experts MLP, sliding window"),
    _exact("qwen2", "query/key biases"),
    _exact("qwen2_moe", "mixture-of-experts MLP"),
    _exact("qwen3", "QK-norm, sliding-window layers"),
    _exact("qwen3_moe", "QK-norm, mixture-of-experts MLP"),
    _exact("qwen3_next", "attention layers among linear-attention layers: only those are extracted; gated output"),
    _exact("gemma", "grouped-query"),
    _exact("gemma2", "logit soft-capping, query_pre_attn_scalar, sliding-window / global layers"),
    _exact("gemma3_text", "QK-norm, sliding-window / global layers"),
    _exact("phi", "partial rotary, QK layer norm"),
    _exact("phi3", "fused QKV projection, sliding window"),
    _exact("gpt_neox", "fused QKV projection, partial rotary"),
    _exact("gptj", "interleaved partial rotary (captured in its own attention method)"),
    _exact("codegen", "interleaved partial rotary (captured in its own attention method)"),
    _exact("gpt_neo", "unscaled logits, local / global layers (captured in its own attention method)"),
    _exact("olmo"),
    _exact("olmo2", "QK-norm over all heads"),
    _exact("olmoe", "QK-norm, mixture-of-experts MLP"),
    _exact("stablelm", "partial rotary, per-head QK layer norm"),
    _exact("starcoder2", "sliding window, biases"),
    _exact("cohere", "interleaved rotary, parallel block"),
    _exact("cohere2", "sliding-window / global layers"),
    _exact("granite", "custom attention multiplier"),
    _exact("glm", "partial interleaved rotary"),
    _exact("glm4", "partial interleaved rotary, extra norms"),
    _exact("helium"),
    _exact("nemotron", "partial rotary"),
    _exact("exaone4", "QK-norm, sliding-window / global layers"),
    _exact("smollm3", "layers without rotary"),
    _exact("arcee"),
    _exact("ernie4_5"),
    _exact("seed_oss", "query/key biases"),
    _exact("deepseek_v3", "multi-head latent attention: query/key size differs from the value's; mixture of experts"),
    _exact("gpt_oss", "a learned sink logit per head in every softmax (stored with the run), sliding-window layers, "
                      "mixture of experts"),
    _exact("llama4_text", "chunked attention on its rotary layers (the chunk size stored with the run); "
                          "position-dependent query temperature on the others (in the captured queries)"),
)


def counts() -> dict[str, int]:
    return {status: sum(family.status == status for family in MODEL_FAMILIES) for status in (EXACT, REFUSED)}


#: the exact model types whose logits ``Run.explain`` and ``Run.circuit`` refuse to split by the parts of the residual
#: stream, and why (:mod:`qkviz.extraction.residual.residual_parts`; every other exact type is split exactly). Proven, like the
#: table, by ``tests/integration/test_query_key_attribution.py`` on each type's tiny random model.
ATTRIBUTION_REFUSED: dict[str, str] = {
    "albert": "its layers share one module; the split needs each layer's own",
    "electra": "its first layer's input is a projection of its embeddings, which the split does not carry",
    "llama4_text": "its query and key parts do not add up to its own queries and keys (attention temperature)",
    "qwen3_next": "it mixes attention with linear-attention layers, whose parts the split does not carry",
}


def attribution_status(model_type: str) -> str:
    """``exact``, or ``refused: why`` for :data:`ATTRIBUTION_REFUSED`; a refused type has nothing to split."""
    family = next((f for f in MODEL_FAMILIES if f.model_type == model_type), None)
    if family is not None and family.status == REFUSED:
        return REFUSED
    why = ATTRIBUTION_REFUSED.get(model_type)
    return EXACT if why is None else f"{REFUSED}: {why}"


def families_markdown() -> str:
    """The table of docs/families.md."""
    lines = ["| model type | status | beyond plain q.k (exact) / why (refused) | query-key attribution |",
             "|---|---|---|---|"]
    lines += [f"| `{f.model_type}` | {f.status} | {f.note} | {attribution_status(f.model_type)} |"
              for f in MODEL_FAMILIES]
    return "\n".join(lines)
