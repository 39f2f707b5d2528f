"""A whole CLIP or SigLIP checkpoint reduced to its vision tower, which qkviz runs; its text tower is not read. The
model types read this way are those whose declaration says so (:data:`qkviz.extraction.families.TOWER_MODEL_TYPES`).
"""

from qkviz.extraction.families import TOWER_MODEL_TYPES


def tower_config(config):
    """The configuration of the model qkviz runs: a CLIP / SigLIP checkpoint's vision configuration, else ``config``."""
    if getattr(config, "model_type", None) in TOWER_MODEL_TYPES:
        return config.vision_config
    return config


def vision_tower(model):
    """The module qkviz runs: a CLIP / SigLIP model's ``vision_model`` (a ``*VisionModel``), else ``model``."""
    if getattr(model.config, "model_type", None) in TOWER_MODEL_TYPES:
        return model.vision_model
    return model
