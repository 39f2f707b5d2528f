"""Gemma 3 (text): rotary decoder with QK-norm, ``query_pre_attn_scalar`` scaling and
interleaved sliding-window / global layers.

Queries and keys are captured after QK-norm and rotation; the scale and each layer's window are
recorded from what the model passes to its attention.
"""

from qkviz.extraction.adapters.base import FamilyAdapter


GEMMA3 = FamilyAdapter(
    family="gemma3",
    model_types=("gemma3_text", "gemma3"),
    architectures=("Gemma3ForCausalLM", "Gemma3TextModel", "Gemma3ForConditionalGeneration"),
    layers_path="layers",
    attention_path="self_attn",
    causal=True,
    qk_norm=True,
    description="Gemma 3 decoders: QK-norm, query_pre_attn_scalar, sliding-window layers",
)
