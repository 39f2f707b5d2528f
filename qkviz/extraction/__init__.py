"""From a model and a corpus to a run directory (torch and transformers): loading models, one adapter
per architecture family (:mod:`qkviz.extraction.adapters`), capturing queries and keys as they enter
the attention dot product, and streaming them to the store.

Importing this package does not import torch: the corpus readers (text and images) and the bundled models' table are
plain Python, and the names that need torch (``extract_run``, ``ADAPTERS``, ``model_adapter``,
``load_model``, ``ExtractionResult``) are imported on first use.
"""

from qkviz.extraction.corpus import DEFAULT_CORPUS, Corpus, load_corpus
from qkviz.extraction.image_corpus import SAMPLE_IMAGES, ImageCorpus, load_images, sample_images
from qkviz.extraction.models import BUNDLED_MODELS

__all__ = ["ADAPTERS", "BUNDLED_MODELS", "DEFAULT_CORPUS", "SAMPLE_IMAGES", "Corpus", "ExtractionResult", "ImageCorpus",
           "model_adapter",
           "extract_run", "load_corpus", "load_images", "load_model", "sample_images"]
#: extraction's steps, by the module that defines each (read when first asked for: most need torch), public for the
#: benches, which time them against a bare forward pass and check every family (bench/)
STEPS = {"CHUNK_BYTES": "chunk_capture", "bytes_per_token": "text_capture", "chunk_sentences": "text_capture",
         "pad_token_id": "text_capture", "padded_batch": "text_capture", "select_sentences": "selection",
         "TextInput": "text_input", "model_directory": "models", "MODEL_FAMILIES": "model_families",
         "REFUSED": "model_families", "counts": "model_families", "EXACT": "model_families",
         # the exactness gate's parts, which bench.gate_error measures one by one
         "GateInput": "exactness_gate", "measure": "exactness_gate", "FLOAT32_BOUND": "exactness_gate",
         "float32_weights": "float32_reference", "forward": "forward_pass",
         "compared_rows": "attention_span", "long_input_tokens": "attention_span", "attention_layers": "chunk_capture",
         "model_for_extraction": "borrowed_model", "LayerAttentionSettings": "capture",
         # the split of a layer's queries and keys by the parts of the residual stream (qkviz.explain)
         "query_key_parts": "residual_parts", "layer_weighted_sums": "residual_parts",
         "AttributionRefused": "residual_parts", "model_identity": "run_manifest",
         # whether a head matters: a head's output removed, the next-token loss (or hidden state) compared
         "ablation_losses": "head_ablation", "Ablation": "head_ablation", "ABLATION_MODES": "head_ablation",
         "load_language_model": "language_model",
         # every head's |W_O^h v_j| (bench.output_norms times it apart from the extraction around it)
         "head_factors": "output_norms", "head_output_norms": "output_norms"}
__all__ += list(STEPS)


def __getattr__(name: str):
    if name in ("extract_run", "ExtractionResult"):
        from qkviz.extraction import pipeline

        return getattr(pipeline, name)
    if name in ("ADAPTERS", "model_adapter"):
        from qkviz.extraction import adapters

        return getattr(adapters, name)
    if name == "load_model":
        from qkviz.extraction.models import load_model

        return load_model
    if name in STEPS:
        import importlib

        return getattr(importlib.import_module(f"qkviz.extraction.{STEPS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
