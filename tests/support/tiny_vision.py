"""The tiny random vision models and image processors: they live in ``bench/support/tiny_vision.py``; the tests
import them from here."""

from bench.support.tiny_vision import (  # noqa: F401  (re-exported for the tests)
    HEADS,
    HIDDEN,
    IMAGE,
    LAYERS,
    PATCH,
    QUERY_KEY_STD,
    VISION_FAMILIES,
    build_tiny_vision_model,
    max_image_attention_error,
    model_attentions,
    tiny_image_processor,
    tiny_vision_config,
    tiny_vision_model,
)
