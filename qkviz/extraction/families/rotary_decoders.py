"""The rotary decoders qkviz knows, one declaration per model type.

Most are found from their structure and need nothing more; GPT-J, CodeGen and GPT-Neo compute attention in a method
of their own (``_attn``), where qkviz captures it (a release that moved the family onto the attention interface has
no such method, and the interface captures it), and GPT-NeoX-Japanese where its own code multiplies queries by keys.
"""

from __future__ import annotations

from qkviz.extraction.families.declaration import MethodCapture, OwnCodeCapture, exact

_IN_ITS_METHOD = "interleaved partial rotary (captured in its own attention method)"

DECLARATIONS = (
    exact("llama", "grouped-query"),
    exact("mistral", "sliding window"),
    exact("ministral", "sliding-window / full layers"),
    exact("mixtral", "mixture-of-experts MLP, sliding window"),
    exact("qwen2", "query/key biases"),
    exact("qwen2_moe", "mixture-of-experts MLP"),
    exact("qwen3", "QK-norm, sliding-window layers"),
    exact("qwen3_moe", "QK-norm, mixture-of-experts MLP"),
    exact("qwen3_next", "attention layers among linear-attention layers: only those are extracted; gated output",
          attribution_refused="it mixes attention with linear-attention layers, whose parts the split does not carry"),
    exact("gemma", "grouped-query"),
    exact("gemma2", "logit soft-capping, query_pre_attn_scalar, sliding-window / global layers"),
    exact("gemma3_text", "QK-norm, sliding-window / global layers"),
    exact("phi", "partial rotary, QK layer norm"),
    exact("phi3", "fused QKV projection, sliding window"),
    exact("gpt_neox", "fused QKV projection, partial rotary"),
    exact("gptj", _IN_ITS_METHOD, captures={"GPTJAttention": MethodCapture(
        "_attn", lambda m: {"scaling": 1 / float(m.scale_attn), "is_causal": True})}),
    exact("codegen", _IN_ITS_METHOD, captures={"CodeGenAttention": MethodCapture(
        "_attn", lambda m: {"scaling": 1 / float(m.scale_attn), "is_causal": True})}),
    # GPT-Neo does not scale its logits; its local layers see the last window_size positions
    exact("gpt_neo", "unscaled logits, local / global layers (captured in its own attention method)",
          captures={"GPTNeoSelfAttention": MethodCapture("_attn", lambda m: {
              "scaling": 1.0, "is_causal": True,
              "sliding_window": int(m.config.window_size) if m.attention_type == "local" else None})}),
    exact("olmo"),
    exact("olmo2", "QK-norm over all heads"),
    exact("olmoe", "QK-norm, mixture-of-experts MLP"),
    exact("stablelm", "partial rotary, per-head QK layer norm"),
    exact("starcoder2", "sliding window, biases"),
    exact("cohere", "interleaved rotary, parallel block"),
    exact("cohere2", "sliding-window / global layers"),
    exact("granite", "custom attention multiplier"),
    exact("glm", "partial interleaved rotary"),
    exact("glm4", "partial interleaved rotary, extra norms"),
    exact("helium"),
    exact("nemotron", "partial rotary"),
    exact("exaone4", "QK-norm, sliding-window / global layers"),
    exact("smollm3", "layers without rotary"),
    exact("arcee"),
    exact("ernie4_5"),
    exact("seed_oss", "query/key biases"),
    exact("deepseek_v3", "multi-head latent attention: query/key size differs from the value's; mixture of experts"),
    exact("gpt_oss", "a learned sink logit per head in every softmax (stored with the run), sliding-window layers, "
                     "mixture of experts"),
    exact("llama4_text", "chunked attention on its rotary layers (the chunk size stored with the run); "
                         "position-dependent query temperature on the others (in the captured queries)",
          attribution_refused="its query and key parts do not add up to its own queries and keys (attention temperature)"),
    # attention computed by the family's own code, captured where it multiplies queries by keys
    exact("gpt_neox_japanese", "rotary inside its own code", in_table=False,
          captures={"modeling_gpt_neox_japanese.GPTNeoXJapaneseAttention": OwnCodeCapture(
              heads=lambda module: module.num_attention_heads, scaling=lambda module: 1.0 / float(module.norm_factor),
              causal=lambda module, config: True)}),
)
