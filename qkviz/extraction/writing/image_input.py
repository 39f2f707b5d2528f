"""An image corpus as a run's input: what :func:`qkviz.extraction.writing.pipeline.write_run` needs of it.

The run is the text run's format (see :mod:`qkviz.extraction.writing.image_tokens` for how images fill its
tables) plus the patch thumbnails (``patches.npy``) and the manifest's ``input`` (the image layout:
special tokens, patch grid, patch size). It is identified, reused, resumed and refused exactly as a
text run, by the same path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture.recorder import LayerAttentionSettings
from qkviz.extraction.streaming.chunk_capture import attention_layers
from qkviz.extraction.gate.exactness_gate import GateResult, check_exactness
from qkviz.extraction.streaming.image_capture import ImageLayout, PixelSource, capture_images, image_layout
from qkviz.extraction.inputs.image_corpus import ImageCorpus
from qkviz.extraction.writing.image_tokens import image_table, image_token_table, select_images
from qkviz.extraction.streaming.logit_parts_capture import bias_parts
from qkviz.extraction.models.loading import LoadedModel
from qkviz.extraction.writing.run_manifest import fingerprint
from qkviz.store import files as run_files
from qkviz.store.run import StoredRun
from qkviz.store.run_writer import RunWriter


@dataclass
class ImageInput:
    """The selected images of an image corpus, as the model's image processor prepares them."""

    loaded: LoadedModel
    adapter: FamilyAdapter
    shape: ModelShape
    corpus_data: ImageCorpus
    source_pixels: PixelSource
    layout: ImageLayout
    selected: np.ndarray     # corpus indices of the run's images, in corpus order
    selection: dict          # the identity's "selection": how the images were chosen
    thumbnails: np.ndarray | None = field(default=None, repr=False)   # [token, t, t, 3] uint8, once captured

    @classmethod
    def select(cls, loaded: LoadedModel, adapter: FamilyAdapter, corpus_data: ImageCorpus, *,
               max_tokens: int | None, max_sentences: int | None, seed: int) -> "ImageInput":
        """The images of ``corpus_data`` the run holds (see :func:`select_images`), laid out as the first one is
        processed; none fitting in ``max_tokens`` is refused."""
        model = loaded.model
        parameter = next(model.parameters())
        source = PixelSource(loaded.processor, corpus_data, parameter.dtype, str(parameter.device))
        layout = image_layout(adapter, model.config, source.pixels([0]))
        selected = select_images(len(corpus_data), layout.n_tokens, max_tokens, max_sentences, seed)
        if not len(selected):
            raise QkvizError(f"no image of {corpus_data.source} fits in {option('max_tokens', max_tokens)} "
                             f"(an image is {layout.n_tokens} tokens); raise it")
        selection = {"max_tokens": max_tokens, "max_sentences": max_sentences, "seed": seed}
        return cls(loaded, adapter, adapter.shape(model.config), corpus_data, source, layout, selected, selection)

    @property
    def corpus(self) -> dict:
        """What of the corpus the run's numbers depend on (the identity's ``corpus``): the images and the
        image processor's settings."""
        return {"sha256": self.corpus_data.sha256, "kind": "images",
                "processor_sha256": fingerprint({"processor": _processor_settings(self.loaded.processor)})}

    @property
    def source(self) -> str:
        return self.corpus_data.source

    @property
    def n_corpus_items(self) -> int:
        return len(self.corpus_data)

    @property
    def n_sequences(self) -> int:
        return len(self.selected)

    @property
    def n_tokens(self) -> int:
        return len(self.selected) * self.layout.n_tokens

    @property
    def n_truncated(self) -> int:
        return 0

    def check_exactness(self) -> GateResult:
        """The exactness gate (:mod:`qkviz.extraction.gate.exactness_gate`) on the first image."""
        model = self.loaded.model
        return check_exactness(model, self.adapter, self.shape, attention_layers(model, self.adapter, self.shape),
                               {"pixel_values": self.source_pixels.pixels(self.selected[:1])}, [self.layout.n_tokens],
                               expected_causal=self.adapter.causal)

    def capture(self, writer: RunWriter, batch_size: int, progress: bool) -> dict[int, LayerAttentionSettings]:
        """Capture the images not yet on disk and cut every image's thumbnails; each layer's attention settings."""
        settings, self.layout, self.thumbnails = capture_images(self.loaded.model, self.adapter, self.shape,
                                                                self.source_pixels, self.selected, self.layout,
                                                                writer, batch_size, progress)
        return settings

    def token_table(self) -> pd.DataFrame:
        return image_token_table(len(self.selected), self.layout)

    def sequence_table(self) -> pd.DataFrame:
        corpus = self.corpus_data
        return image_table([corpus.ids[i] for i in self.selected], [corpus.labels[i] for i in self.selected],
                           self.selected, self.layout)

    def manifest_input(self) -> dict | None:
        """The manifest's ``input``: the image layout."""
        return self.layout.as_manifest()

    def logit_parts(self) -> dict[str, np.ndarray]:
        """``{run file: array}``: the query and key biases (all an image model's logit parts are)."""
        return bias_parts(self.loaded.model, self.adapter, self.shape)

    def extra_arrays(self) -> dict[str, np.ndarray]:
        """The patch thumbnails."""
        return {run_files.PATCHES: self.thumbnails}

    def summary(self, run: StoredRun) -> str:
        """What was extracted, for the log line."""
        layout = self.layout
        return (f"{run.n_sentences} images ({layout.rows} x {layout.cols} patches, {len(layout.prefix)} special "
                f"tokens), {run.n_tokens} tokens, {run.n_layers} layers x {run.n_heads} heads")


def _processor_settings(processor) -> str:
    """What of the image processor decides the pixels the model sees: its class and saved configuration."""
    settings = processor.to_json_string() if hasattr(processor, "to_json_string") else ""
    return f"{type(processor).__name__} {settings}"
