"""The tiny random text models and their tokenizers: they live in ``bench/support/tiny_models.py`` (the benches'
smoke runs build them too); the tests import them from here."""

from bench.support.tiny_models import (  # noqa: F401  (re-exported for the tests)
    CONTEXT,
    DECODER_FAMILIES,
    ENCODER_FAMILIES,
    FAMILIES,
    HEADS,
    HIDDEN,
    INIT_RANGE,
    KV_HEADS,
    LAYERS,
    QUERY_KEY_PROJECTIONS,
    VOCAB_SIZE,
    build_tiny_model,
    decoder_tokenizer,
    encoder_tokenizer,
    perturbed_model,
    tiny_config,
)
