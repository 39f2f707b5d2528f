"""GPT-2: causal decoder with one fused ``c_attn`` projection split into query, key and value.

The model splits ``c_attn`` itself before calling the attention interface, so the captured
queries and keys are already per head. ``scale_attn_by_inverse_layer_idx`` is part of the scale
the model passes and is recorded per layer.
"""

from qkviz.extraction.adapters.base import EmbeddingPaths, FamilyAdapter

GPT2 = FamilyAdapter(
    family="gpt2",
    model_types=("gpt2",),
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
