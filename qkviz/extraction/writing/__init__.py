"""A run directory assembled: the input (text or images) through the model, its tables, its manifest and
fingerprint, and the run written whole or not at all (``qkviz extract``)."""

from qkviz.extraction.writing.pipeline import extract_run
from qkviz.extraction.writing.run_manifest import ExtractionResult, model_identity
from qkviz.extraction.writing.text_input import TextInput

__all__ = ["ExtractionResult", "TextInput", "extract_run", "model_identity"]
