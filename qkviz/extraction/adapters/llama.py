"""Llama, Qwen2 and Mistral: causal decoders with rotary positions and grouped-query attention.

Queries and keys are captured after the rotary rotation; each key-value head is stored once and
serves ``n_heads // n_kv_heads`` query heads. Mistral's (and optionally Qwen2's) sliding window
is recorded per layer from what the model passes to its attention.
"""

from qkviz.extraction.adapters.base import FamilyAdapter


def _decoder(family: str, model_types: tuple[str, ...], architectures: tuple[str, ...],
             description: str) -> FamilyAdapter:
    return FamilyAdapter(
        family=family,
        model_types=model_types,
        architectures=architectures,
        layers_path="layers",
        attention_path="self_attn",
        causal=True,
        description=description,
    )


LLAMA = _decoder("llama", ("llama",), ("LlamaModel", "LlamaForCausalLM"),
                 "Llama decoders (SmolLM2, Llama 2/3): rotary, grouped-query")
QWEN2 = _decoder("qwen2", ("qwen2",), ("Qwen2Model", "Qwen2ForCausalLM"),
                 "Qwen2 decoders: rotary, grouped-query, query/key biases")
MISTRAL = _decoder("mistral", ("mistral",), ("MistralModel", "MistralForCausalLM"),
                   "Mistral decoders: rotary, grouped-query, sliding window")
