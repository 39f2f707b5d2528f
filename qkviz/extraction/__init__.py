"""From a model and a corpus to a run directory (torch and transformers), in nine parts:

- :mod:`~qkviz.extraction.inputs`: the corpus (text or images), the sentences chosen and long documents split;
- :mod:`~qkviz.extraction.models`: the model a user names, bundled or local, loaded offline, or borrowed from memory;
- :mod:`~qkviz.extraction.families`: every model family qkviz knows, one declaration per model type (exact, or
  refused and why; its adapter and captures);
- :mod:`~qkviz.extraction.adapters`: how qkviz reaches a family's attention (declared, or found from its structure);
- :mod:`~qkviz.extraction.capture`: queries and keys caught as they enter the attention dot product;
- :mod:`~qkviz.extraction.streaming`: the forward loops that stream them, and what else a run keeps, to the store;
- :mod:`~qkviz.extraction.gate`: the exactness gate, which proves the capture against the model's own attention;
- :mod:`~qkviz.extraction.residual`: the residual stream entering a layer, split into the parts that wrote it;
- :mod:`~qkviz.extraction.writing`: a run directory assembled from them (``qkviz extract``).

This package's own names are what a user needs: :func:`extract_run` and its corpus and model readers. Importing it
does not import torch: the corpus readers and the bundled models' table are plain Python, and the names that need
torch are imported on first use.
"""

from qkviz.core.lazy_names import lazy_names
from qkviz.extraction.inputs import (DEFAULT_CORPUS, SAMPLE_IMAGES, Corpus, ImageCorpus, load_corpus, load_images,
                                     sample_images)
from qkviz.extraction.models import BUNDLED_MODELS

__all__ = ["ADAPTERS", "BUNDLED_MODELS", "DEFAULT_CORPUS", "SAMPLE_IMAGES", "Corpus", "ExtractionResult", "ImageCorpus",
           "extract_run", "load_corpus", "load_images", "load_model", "model_adapter", "sample_images"]

__getattr__ = lazy_names(__name__, {"extract_run": "writing", "ExtractionResult": "writing", "ADAPTERS": "adapters",
                                    "model_adapter": "adapters", "load_model": "models"})
