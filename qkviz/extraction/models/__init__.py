"""The model a run reads: a name resolved before anything loads (a bundled name, a near miss, a hub id), the bundled
models (GGUF files converted once and cached), any Hugging Face model loaded offline, a model object borrowed from a
notebook, the causal model with its language-model head, and the one boundary around every pass through a model.

The bundled models' table and the loader import no torch; the rest is imported on first use.
"""

from qkviz.core.lazy_names import lazy_names
from qkviz.extraction.models.loading import BUNDLED_MODELS, BundledModel, LoadedModel, load_model, model_directory

__all__ = ["BUNDLED_MODELS", "BundledModel", "LoadedModel", "OutOfMemory", "load_language_model", "load_model",
           "model_directory", "model_for_extraction", "model_step"]

__getattr__ = lazy_names(__name__, {"model_for_extraction": "borrowed_model", "load_language_model": "language_model",
                                    "model_step": "model_boundary", "OutOfMemory": "model_boundary"})
