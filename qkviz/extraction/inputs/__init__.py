"""A run's input before any model: the corpus read (text, tables, datasets, images), its sentences chosen and
tokenized, and a document longer than one sequence split into windows. Plain Python: no torch."""

from qkviz.extraction.inputs.corpus import DEFAULT_CORPUS, Corpus, load_corpus
from qkviz.extraction.inputs.image_corpus import SAMPLE_IMAGES, ImageCorpus, is_image_source, load_images, sample_images
from qkviz.extraction.inputs.long_documents import DocumentRule, default_overlap, refused_past, windows_of
from qkviz.extraction.inputs.selection import TokenizedSentence, select_sentences

__all__ = ["DEFAULT_CORPUS", "SAMPLE_IMAGES", "Corpus", "DocumentRule", "ImageCorpus", "TokenizedSentence",
           "default_overlap", "is_image_source", "load_corpus", "load_images", "refused_past", "sample_images",
           "select_sentences", "windows_of"]
