"""Family adapters, registered by Hugging Face model type and architecture name."""

from __future__ import annotations

from qkviz.extraction.adapters.base import FamilyAdapter, ModelShape
from qkviz.extraction.adapters.bert import BERT, ROBERTA
from qkviz.extraction.adapters.distilbert import DISTILBERT
from qkviz.extraction.adapters.gemma3 import GEMMA3
from qkviz.extraction.adapters.gpt2 import GPT2
from qkviz.extraction.adapters.llama import LLAMA, MISTRAL, QWEN2
from qkviz.extraction.adapters.vision import VISION_ADAPTERS, tower_config, vision_tower
from qkviz.core.errors import QkvizError

ADAPTERS: tuple[FamilyAdapter, ...] = (BERT, ROBERTA, DISTILBERT, GPT2, LLAMA, QWEN2, MISTRAL, GEMMA3, *VISION_ADAPTERS)

_BY_MODEL_TYPE = {model_type: adapter for adapter in ADAPTERS for model_type in adapter.model_types}
_BY_ARCHITECTURE = {arch: adapter for adapter in ADAPTERS for arch in adapter.architectures}


def supported_families() -> list[str]:
    return [adapter.family for adapter in ADAPTERS]


def adapter_for(config) -> FamilyAdapter:
    """The adapter for a model configuration (a CLIP / SigLIP checkpoint's: its vision tower's), or a
    :class:`QkvizError` naming the supported ones."""
    config = tower_config(config)
    adapter = _BY_MODEL_TYPE.get(getattr(config, "model_type", None))
    for architecture in getattr(config, "architectures", None) or ():
        adapter = adapter or _BY_ARCHITECTURE.get(architecture)
    if adapter is None:
        name = ", ".join(getattr(config, "architectures", None) or [str(getattr(config, "model_type", "?"))])
        raise QkvizError(f"unsupported architecture {name}; supported families: {', '.join(supported_families())}")
    adapter.check_supported(config)
    return adapter


__all__ = ["ADAPTERS", "FamilyAdapter", "ModelShape", "adapter_for", "supported_families", "tower_config",
           "vision_tower"]
