"""Tiny randomly initialised models of every model type in :data:`qkviz.extraction.families.MODEL_FAMILIES`,
built from ``AutoConfig.for_model`` (no downloads).

Every model gets the same small shape (:data:`COMMON`; a configuration maps the names to its own through its
``attribute_map``) and, where a family needs it, a few settings of its own (:data:`OVERRIDES`): windows shorter
than the test sentences so that a sliding-window mask matters, layer-type patterns that alternate within the
few layers, sizes that a family's layout requires. Weights are drawn with a large ``initializer_range`` so that
attention is far from uniform and an error in the captured vectors shows.
"""

from __future__ import annotations

import torch
import transformers
from transformers.models.auto import modeling_auto

VOCAB_SIZE = 400
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
LAYERS = 2
CONTEXT = 256
INIT_RANGE = 0.12
WINDOW = 6

COMMON = dict(vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HIDDEN // HEADS,
              max_position_embeddings=CONTEXT, initializer_range=INIT_RANGE, pad_token_id=0, bos_token_id=1,
              eos_token_id=2, tie_word_embeddings=False)
_SLIDING = dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"])
#: one tower of a model built of several (a sub-configuration)
_TOWER = dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_attention_heads=HEADS, num_key_value_heads=HEADS,
              head_dim=HIDDEN // HEADS)
#: multi-head latent attention (DeepSeek-V2 and its kin): low-rank queries and keys, a rotary part beside the rest
_MLA = dict(kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
            num_key_value_heads=HEADS, head_dim=8)
_MOE = dict(num_experts=4, num_experts_per_tok=2, num_local_experts=4, moe_intermediate_size=HIDDEN)

#: a family's own settings, beside :data:`COMMON`
OVERRIDES: dict[str, dict] = {
    "mistral": dict(sliding_window=WINDOW),
    "ministral": dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]),
    "gemma2": dict(_SLIDING, query_pre_attn_scalar=24, attn_logit_softcapping=2.0, final_logit_softcapping=None),
    "gemma3_text": dict(_SLIDING, query_pre_attn_scalar=24),
    "cohere2": dict(_SLIDING),
    "qwen2": dict(use_sliding_window=False),
    "qwen3": dict(_SLIDING, use_sliding_window=True, max_window_layers=1),
    "mixtral": dict(_MOE, sliding_window=WINDOW),
    "qwen2_moe": dict(_MOE, shared_expert_intermediate_size=HIDDEN, decoder_sparse_step=1),
    "qwen3_moe": dict(_MOE, decoder_sparse_step=1),
    "olmoe": dict(_MOE),
    "phi3": dict(sliding_window=WINDOW, partial_rotary_factor=1.0),
    "phi": dict(partial_rotary_factor=0.5, qk_layernorm=True, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0),
    "stablelm": dict(partial_rotary_factor=0.5, qk_layernorm=True, use_qkv_bias=True),
    "starcoder2": dict(sliding_window=WINDOW, use_bias=True, residual_dropout=0.0, embedding_dropout=0.0),
    "gpt_neox": dict(rotary_pct=0.5, use_parallel_residual=True, attention_bias=True),
    "gptj": dict(rotary_dim=8, n_positions=CONTEXT),
    "codegen": dict(rotary_dim=8, n_positions=CONTEXT, n_ctx=CONTEXT),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=WINDOW, max_position_embeddings=CONTEXT),
    "gpt_bigcode": dict(multi_query=True, n_positions=CONTEXT),
    "opt": dict(ffn_dim=2 * HIDDEN, word_embed_proj_dim=HIDDEN, do_layer_norm_before=True, init_std=INIT_RANGE),
    "falcon": dict(new_decoder_architecture=True, num_kv_heads=KV_HEADS, alibi=False, bias=True),
    "biogpt": dict(scale_embedding=True),
    "xglm": dict(d_model=HIDDEN, ffn_dim=2 * HIDDEN, num_layers=LAYERS, attention_heads=HEADS, init_std=INIT_RANGE),
    "deepseek_v3": dict(kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
                        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=HIDDEN, n_group=1,
                        topk_group=1, first_k_dense_replace=1, n_shared_experts=1, num_key_value_heads=HEADS,
                        head_dim=8),
    # chunks shorter than the test sentences; a query temperature that grows within them (floor_scale: 8,192)
    "llama4_text": dict(attention_chunk_size=8, no_rope_layers=[1, 0], interleave_moe_layer_step=1,
                        num_local_experts=4, intermediate_size_mlp=2 * HIDDEN, floor_scale=4, attn_scale=0.5),
    "gpt_oss": dict(_SLIDING, num_local_experts=4, num_experts_per_tok=2),
    "qwen3_next": dict(layer_types=["linear_attention", "full_attention"], linear_num_value_heads=4,
                       linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16, num_experts=4,
                       num_experts_per_tok=2, moe_intermediate_size=HIDDEN, shared_expert_intermediate_size=HIDDEN,
                       decoder_sparse_step=1),
    "deepseek_v2": dict(_MLA, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=HIDDEN, n_group=1,
                        topk_group=1, first_k_dense_replace=1, n_shared_experts=1),
    "deepseek_v32": dict(_MLA, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=HIDDEN, n_group=1,
                         topk_group=1, n_shared_experts=1, index_n_heads=2, index_head_dim=16,
                         layer_types=["indexed_attention"] * LAYERS, mlp_layer_types=["dense", "sparse"]),
    "kimi_linear": dict(_MLA, q_lora_rank=None, layer_types=["linear_attention", "full_attention"],
                        mlp_layer_types=["dense", "sparse"], linear_head_dim=16, linear_num_heads=HEADS,
                        num_experts=4, num_experts_per_token=2, moe_intermediate_size=HIDDEN),
    "bailing_hybrid": dict(_MLA, layer_types=["linear_attention", "full_attention"], layer_group_size=2, n_group=1,
                           topk_group=1,
                           mlp_layer_types=["dense", "sparse"], linear_head_dim=16, linear_num_heads=HEADS,
                           num_experts=4, num_experts_per_tok=2, moe_intermediate_size=HIDDEN),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                  num_experts=4, num_experts_per_tok=2, mamba_d_state=8, mamba_expand=2),
    "mamba2": dict(num_heads=HEADS, head_dim=2 * HIDDEN // HEADS, n_groups=1, state_size=8),
    "whisper": dict(init_std=INIT_RANGE, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                    decoder_attention_heads=HEADS, encoder_ffn_dim=2 * HIDDEN, decoder_ffn_dim=2 * HIDDEN),
    # an image-text model whose text decoder (Persimmon) reads token ids as they are
    "fuyu": dict(text_config=dict(vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                                  num_hidden_layers=LAYERS, num_attention_heads=HEADS, max_position_embeddings=CONTEXT,
                                  initializer_range=INIT_RANGE), image_token_id=VOCAB_SIZE - 1, patch_size=4),
    # XLM and FlauBERT draw weights with init_std, not initializer_range
    "xlm": dict(init_std=INIT_RANGE),
    "flaubert": dict(init_std=INIT_RANGE),
    "longcat_flash": dict(_MLA, n_routed_experts=4, moe_topk=2, expert_ffn_hidden_size=HIDDEN, zero_expert_num=0),
    "mellum": dict(_MOE, moe_intermediate_size=HIDDEN),
    # the byte latent transformer: a patcher, a local encoder and decoder and a global model, each with its own shape
    "blt": dict(encoder_hash_byte_group_vocab=1000, patcher_config=dict(_TOWER, num_hidden_layers=LAYERS),
                encoder_config=dict(_TOWER, hidden_size_global=HIDDEN, num_hidden_layers=1),
                decoder_config=dict(_TOWER, hidden_size_global=HIDDEN, num_hidden_layers=LAYERS),
                global_config=dict(_TOWER, num_hidden_layers=LAYERS)),
    "exaone4": dict(sliding_window=WINDOW, sliding_window_pattern="LG", layer_types=["sliding_attention",
                                                                                    "full_attention"]),
    "smollm3": dict(no_rope_layers=[1, 0], use_sliding_window=False),
    "modernbert": dict(global_attn_every_n_layers=2, local_attention=WINDOW, layer_types=["full_attention",
                                                                                        "sliding_attention"]),
    "jetmoe": dict(num_local_experts=4, num_experts_per_tok=2, kv_channels=HIDDEN // HEADS),
    "dbrx": dict(d_model=HIDDEN, n_heads=HEADS, n_layers=LAYERS, attn_config=dict(kv_n_heads=KV_HEADS),
                 ffn_config=dict(ffn_hidden_size=2 * HIDDEN, moe_num_experts=4, moe_top_k=2)),
    "albert": dict(embedding_size=32),
    "electra": dict(embedding_size=32),
    "bloom": dict(n_head=HEADS),
    "mpt": dict(d_model=HIDDEN, n_heads=HEADS, n_layers=LAYERS),
    "nemotron": dict(partial_rotary_factor=0.5),
    "persimmon": dict(partial_rotary_factor=0.5, qk_layernorm=True),
    "glm": dict(partial_rotary_factor=0.5),
    "glm4": dict(partial_rotary_factor=0.5),
}


#: weights a family's own initialisation draws with a fixed spread, whatever the configuration's initializer_range,
#: drawn again with :data:`INIT_RANGE` (by the end of their parameter names): OpenAI GPT's Conv1D projections (std
#: 0.02) leave its attention within 0.024 of uniform, where a comparison with it proves nothing
REDRAWN: dict[str, tuple[str, ...]] = {
    "openai-gpt": ("attn.c_attn.weight",),
}


def tiny_family_config(model_type: str, **settings):
    """The tiny configuration: :data:`COMMON` where the family has the setting (by its name or an alias; a real
    checkpoint has no others), then the family's :data:`OVERRIDES`, then ``settings`` (a variant of the family)."""
    default = transformers.AutoConfig.for_model(model_type)
    known = set(default.to_dict()) | set(getattr(default, "attribute_map", {}))
    common = {name: value for name, value in COMMON.items() if name in known}
    return transformers.AutoConfig.for_model(model_type, **{**common, **OVERRIDES.get(model_type, {}), **settings})


def model_class(config):
    """The auto class a text model of ``config`` is built with: the base model (``AutoModel``), except where
    transformers registers one that reads something else than token ids: then the language model it registers for
    the type (causal, then masked). Whisper's base model is the speech encoder-decoder, which reads audio features,
    its causal language model the text decoder alone."""
    model_type = config.model_type
    base = modeling_auto.MODEL_MAPPING_NAMES.get(model_type)
    base_class = getattr(transformers, base, None) if isinstance(base, str) else None
    if base_class is None or base_class.main_input_name == "input_ids":
        return transformers.AutoModel
    if model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return transformers.AutoModelForCausalLM
    if model_type in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return transformers.AutoModelForMaskedLM
    return transformers.AutoModel


def tiny_family_model(model_type: str, seed: int = 0, **settings) -> torch.nn.Module:
    """A tiny random ``model_type`` model (its base model, or its language model: :func:`model_class`; with the
    configuration ``settings`` of a variant) in float32 with eager-comparable weights: norms and biases that start
    at zero or one are given some spread, so that QK-norms and biases matter, and sink logits (gpt-oss) are drawn
    as large as the attention logits, so that a sink takes a share of every row that a test can see; weights a
    family draws with a fixed spread are drawn again (:data:`REDRAWN`)."""
    torch.manual_seed(seed)
    config = tiny_family_config(model_type, **settings)
    model = model_class(config).from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 1 and ("norm" in name or name.endswith("bias")):
                parameter.add_(torch.randn_like(parameter) * 0.3)
            elif name.endswith("sinks"):
                parameter.copy_(torch.randn_like(parameter) * 2.0)
            elif name.endswith(REDRAWN.get(model_type, ())):
                parameter.normal_(0.0, INIT_RANGE)
    return model.eval()


def family_runs(lines: list[str], tokenizer, tmp_path_factory, settings=None):
    """``get(model_type, seed=0) -> (model, run)``: a tiny ``model_type`` model (:func:`tiny_family_model`, its
    configuration ``settings(model_type)``, none by default) and its run over ``lines``, each made once (a module's
    fixture keeps the getter)."""
    import qkviz

    made = {}

    def get(model_type: str, seed: int = 0):
        if (model_type, seed) not in made:
            model = tiny_family_model(model_type, seed, **(settings(model_type) if settings else {}))
            run = qkviz.extract(model, lines, tmp_path_factory.mktemp(f"{model_type}{seed}") / "run",
                                tokenizer=tokenizer, progress=False)
            made[(model_type, seed)] = (model, run)
        return made[(model_type, seed)]

    return get
