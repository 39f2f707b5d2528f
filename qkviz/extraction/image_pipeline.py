"""``qkviz extract --images``: from a vision transformer and an image corpus to a complete run directory.

The run is the text run's format (see :mod:`qkviz.extraction.image_tokens` for how images fill its
tables) plus the patch thumbnails (``patches.npy``) and the manifest's ``input`` (the image layout:
special tokens, patch grid, patch size). It is identified, reused, resumed and refused exactly as a
text run (:mod:`qkviz.extraction.pipeline`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from qkviz.core.errors import QkvizError
from qkviz.extraction.adapters import FamilyAdapter
from qkviz.extraction.image_capture import PixelSource, capture_images, image_layout
from qkviz.extraction.image_tokens import image_table, image_token_table, select_images
from qkviz.extraction.logit_parts_capture import bias_parts
from qkviz.extraction.models import LoadedModel
from qkviz.extraction.run_manifest import ExtractionResult, fingerprint, model_identity, run_manifest
from qkviz.store import files as run_files
from qkviz.store.run import open_stored_run
from qkviz.store.run_writer import DirectoryPlan, RunWriter, StoreLayout, plan_directory

logger = logging.getLogger(__name__)


def extract_images(loaded: LoadedModel, adapter: FamilyAdapter, corpus, out: Path, started: float, *,
                   max_tokens: int | None, max_sentences: int | None, seed: int, dtype: str, batch_size: int,
                   overwrite: bool, head_update: bool, progress: bool):
    """Extract every head's queries and keys over the images of ``corpus`` (an ``ImageCorpus``) into ``out``."""
    model = loaded.model
    parameter = next(model.parameters())
    device = str(parameter.device)
    shape = adapter.shape(model.config)
    source = PixelSource(loaded.processor, corpus, parameter.dtype, device)
    layout = image_layout(adapter, model.config, source.pixels([0]))
    selected = select_images(len(corpus), layout.n_tokens, max_tokens, max_sentences, seed)
    if not len(selected):
        raise QkvizError(f"no image of {corpus.source} fits in --max-tokens {max_tokens} (an image is "
                         f"{layout.n_tokens} tokens); raise it")
    identity = {
        "schema_version": run_files.SCHEMA_VERSION,
        "model": model_identity(loaded, adapter.family),
        "corpus": {"sha256": corpus.sha256, "kind": "images",
                   "processor_sha256": fingerprint({"processor": _processor_settings(loaded.processor)})},
        "selection": {"max_tokens": max_tokens, "max_sentences": max_sentences, "seed": seed},
        "dtype": dtype,
        **({"head_update": True} if head_update else {}),
    }
    run_fingerprint = fingerprint(identity)
    plan = plan_directory(out, run_fingerprint, overwrite)
    if plan is DirectoryPlan.REUSE:
        logger.info("%s already holds this run; reusing it", out)
        return ExtractionResult(open_stored_run(out), "reused", time.perf_counter() - started)
    n_tokens = len(selected) * layout.n_tokens
    store = StoreLayout(shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.head_dim, n_tokens, dtype, head_update)
    writer = RunWriter(out, run_fingerprint, store, resume=plan is DirectoryPlan.RESUME)
    resumed = writer.tokens_done > 0
    try:
        settings, layout, thumbnails = capture_images(model, adapter, shape, source, selected, layout, writer,
                                                      batch_size, progress)
    finally:
        writer.close()
    tokens = image_token_table(len(selected), layout)
    manifest = run_manifest(identity, loaded, adapter, shape, settings, tokens, corpus_source=corpus.source,
                            n_corpus_items=len(corpus), n_sentences=len(selected), n_truncated=0)
    manifest["input"] = layout.as_manifest()
    manifest["extraction"] = {"device": device, "batch_size": batch_size}
    parts = bias_parts(model, adapter, shape)
    manifest["logit_parts"] = sorted(parts)
    images = image_table([corpus.ids[i] for i in selected], [corpus.labels[i] for i in selected], selected, layout)
    writer.finish(manifest, tokens, images, {**parts, run_files.PATCHES: thumbnails})
    seconds = time.perf_counter() - started
    run = open_stored_run(out)
    logger.info("%s: %s %d images (%d x %d patches, %d special tokens), %d tokens, %d layers x %d heads in %.1f s",
                out, "resumed and finished" if resumed else "extracted", run.n_sentences, layout.rows, layout.cols,
                len(layout.prefix), run.n_tokens, run.n_layers, run.n_heads, seconds)
    return ExtractionResult(run, "resumed" if resumed else "extracted", seconds)


def _processor_settings(processor) -> str:
    """What of the image processor decides the pixels the model sees: its class and saved configuration."""
    settings = processor.to_json_string() if hasattr(processor, "to_json_string") else ""
    return f"{type(processor).__name__} {settings}"
