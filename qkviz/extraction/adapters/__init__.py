"""How qkviz reaches a model's attention: found from the model's structure, with declared exceptions.

Most text families need nothing of their own: :func:`model_adapter` finds the attention modules and their
layers from the model itself (:mod:`qkviz.extraction.adapters.discovery`). Declared adapters remain where a
family needs what structure cannot tell: BERT-layout encoders (the output projection outside the attention
module, the embedding parts), DistilBERT, GPT-2 (one fused ``Conv1D`` projection) and the image encoders; each is
part of its family's declaration (:mod:`qkviz.extraction.families`), as is a refusal by name of a family that adds
a term q.k cannot express. Every other family passes the exactness gate before a run is written.
"""

from __future__ import annotations

from qkviz.core.errors import QkvizError
from qkviz.extraction.adapters.discovery import discover_adapter
from qkviz.extraction.adapters.vision_tower import tower_config, vision_tower
from qkviz.extraction.families import (DECLARED_ADAPTERS, EXACT, MODEL_FAMILIES, REFUSED, FamilyAdapter, ModelShape,
                                       attribution_status, counts, refusal_reason)

#: families declared because structure alone cannot tell all qkviz needs of them
ADAPTERS: tuple[FamilyAdapter, ...] = DECLARED_ADAPTERS

_BY_MODEL_TYPE = {model_type: adapter for adapter in ADAPTERS for model_type in adapter.model_types}
_BY_ARCHITECTURE = {arch: adapter for adapter in ADAPTERS for arch in adapter.architectures}


def declared_adapter(config) -> FamilyAdapter | None:
    """The declared adapter for a model configuration (a CLIP / SigLIP checkpoint's: its vision tower's); None
    for a family found from the model's structure once loaded (:func:`model_adapter`). A family that adds a term
    q.k cannot express is a one-line :class:`QkvizError` saying which."""
    config = tower_config(config)
    adapter = _BY_MODEL_TYPE.get(getattr(config, "model_type", None))
    for architecture in getattr(config, "architectures", None) or ():
        adapter = adapter or _BY_ARCHITECTURE.get(architecture)
    reason = adapter.unsupported_reason(config) if adapter is not None else refusal_reason(config)
    if reason:
        family = adapter.family if adapter is not None else getattr(config, "model_type", "?")
        raise QkvizError(f"{family} model not supported: {reason}")
    return adapter


def modality_of(config) -> str:
    """``"image"`` for a declared image family, else ``"text"`` (refused families raise, as in
    :func:`declared_adapter`)."""
    adapter = declared_adapter(config)
    return "text" if adapter is None else adapter.modality


def model_adapter(model) -> FamilyAdapter:
    """The adapter of a loaded model: its declared one, or one found from its structure."""
    adapter = declared_adapter(model.config)
    if adapter is not None:
        return adapter
    return discover_adapter(model, str(getattr(model.config, "model_type", None) or type(model).__name__))


__all__ = ["ADAPTERS", "EXACT", "MODEL_FAMILIES", "REFUSED", "FamilyAdapter", "ModelShape", "attribution_status",
           "counts", "declared_adapter", "modality_of", "model_adapter", "tower_config", "vision_tower"]
