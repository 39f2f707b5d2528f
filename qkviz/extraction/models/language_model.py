"""A causal model with its language-model head, for what needs the model's own next-token prediction (ablation).

Extraction loads the base model (:func:`qkviz.extraction.load_model`: the attention is all it reads). A head's
effect on the next-token loss needs the head on top of it, so :func:`load_language_model` loads the same bundled
name or directory as transformers' causal language model: the same base weights, with the head the checkpoint
holds (or ties to its embeddings). A checkpoint saved without its head (a base model), or a family with no causal
language-model class, has none: ``None``, and the caller measures without it.
"""

from __future__ import annotations

import logging

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.extraction.models.loading import model_directory, with_attention_implementation

logger = logging.getLogger(__name__)


def load_language_model(spec: str, device: str = "cpu"):
    """The causal language model of ``spec`` (a bundled name or a model directory) in eval mode, in float32, or
    ``None`` where it has none: its family has no causal language-model class, or its weights lack the head (any
    weight the checkpoint does not hold would be drawn at random)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise QkvizError(f"{option('device', device)} was asked for but no CUDA device is available; use "
                         f"{option('device', 'cpu')}")
    directory, _source = model_directory(spec)
    try:
        config = AutoConfig.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise QkvizError(f"model {spec!r} cannot be read ({error})") from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        logger.info("%s (%s) has no causal language-model class in transformers", spec, config.model_type)
        return None
    try:
        model, info = with_attention_implementation(AutoModelForCausalLM.from_pretrained,
                                                    pretrained_model_name_or_path=directory, config=config,
                                                    dtype=torch.float32, output_loading_info=True)
    except (OSError, ValueError) as error:
        raise QkvizError(f"model {spec!r} cannot be loaded as a language model ({error})") from None
    if info.get("missing_keys"):
        logger.info("%s was saved without its language-model head (%s missing)", spec,
                    sorted(info["missing_keys"])[0])
        return None
    return model.to(device).eval()
