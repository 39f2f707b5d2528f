"""``qkviz extract``: from a model and a corpus to a complete run directory.

The run is identified by a fingerprint of everything that determines its numbers (the model's
weights and configuration, the corpus, the selection, the stored precision); the same inputs
reuse the run, an interrupted run with the same inputs resumes, and different inputs into an
existing run directory are refused unless ``overwrite``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from qkviz.store import files as run_files
from qkviz.extraction.adapters import adapter_for
from qkviz.extraction.corpus import Corpus, load_corpus
from qkviz.core.errors import QkvizError
from qkviz.extraction.text_capture import capture_sentences, pad_token_id
from qkviz.extraction.image_corpus import is_image_source, load_images
from qkviz.extraction.image_pipeline import extract_images
from qkviz.extraction.logit_parts_capture import capture_logit_parts
from qkviz.extraction.borrowed_model import check_token_ids, model_for_extraction
from qkviz.extraction.models import LoadedModel
from qkviz.extraction.run_manifest import ExtractionResult, fingerprint, model_identity, run_manifest
from qkviz.store.locks import exclusive_lock
from qkviz.store.run import open_stored_run
from qkviz.store.run_writer import DirectoryPlan, RunWriter, StoreLayout, plan_directory
from qkviz.extraction.selection import select_sentences
from qkviz.extraction.token_table import sentence_table, token_table

logger = logging.getLogger(__name__)

STORED_DTYPES = ("float16", "float32")


def extract_run(model, corpus, out: str | Path, *, tokenizer=None, processor=None, max_tokens: int | None = None,
                max_sentences: int | None = None, seed: int = 0, dtype: str = "float32", batch_size: int = 16,
                max_length: int | None = None, device: str | None = None, text_column: str = "text",
                overwrite: bool = False, head_update: bool = False, progress: bool = False) -> ExtractionResult:
    """Extract every head's queries, keys and value norms over ``corpus`` into the run ``out``;
    with ``head_update``, also each head's update relative to the hidden state per token
    (:mod:`qkviz.extraction.head_update_capture`). ``model`` is a name or directory, or a model object with
    ``tokenizer`` (an image model: ``processor``; :mod:`qkviz.extraction.borrowed_model`); ``corpus`` a file or
    dataset name, or an iterable of strings (:func:`qkviz.extraction.corpus.load_corpus`), or images
    (:func:`qkviz.extraction.image_corpus.load_images`: a folder, a list file, ``imagefolder:DIR``, PIL
    images or arrays; :mod:`qkviz.extraction.image_pipeline`). ``device`` None: ``"cpu"`` for a name, where
    the model object is for an object. One extraction writes a run directory at a time: a second one into
    the same ``out`` is refused while the first runs."""
    out = Path(out)
    started = time.perf_counter()
    _check_options(dtype, batch_size, max_tokens, max_sentences, max_length)
    images = is_image_source(corpus)
    if images and max_length is not None:
        raise QkvizError("--max-length truncates sentences; an image is always all its patches (leave it out)")
    corpus_data = load_images(corpus) if images else load_corpus(corpus, text_column)
    with exclusive_lock(out.parent / f".{out.name}.lock", wait=False,
                        busy_message=f"another qkviz extract is writing {out}; wait for it to finish"), \
            model_for_extraction(model, tokenizer, device, progress, processor=processor,
                                 modality="image" if images else "text") as loaded:
        options = dict(max_tokens=max_tokens, max_sentences=max_sentences, seed=seed, dtype=dtype,
                       batch_size=batch_size, head_update=head_update, overwrite=overwrite, progress=progress)
        if images:
            return extract_images(loaded, adapter_for(loaded.model.config), corpus_data, out, started, **options)
        return _extract(loaded, corpus_data, out, started, max_length=max_length, **options)


def _extract(loaded: LoadedModel, corpus_data: Corpus, out: Path, started: float, *, max_tokens: int | None,
             max_sentences: int | None, seed: int, dtype: str, batch_size: int, max_length: int | None,
             overwrite: bool, head_update: bool, progress: bool) -> ExtractionResult:
    device = str(next(loaded.model.parameters()).device)
    config = loaded.model.config
    adapter = adapter_for(config)
    shape = adapter.shape(config)
    length_limit = _length_limit(adapter.max_tokens_per_sequence(config), max_length)
    _check_room_for_text(loaded.tokenizer, length_limit)
    sentences = select_sentences(corpus_data.sentences, loaded.tokenizer, length_limit, max_tokens,
                                 max_sentences, seed)
    if not sentences:
        raise QkvizError(f"no sentence of {corpus_data.source} fits in --max-tokens {max_tokens}; raise it")
    check_token_ids(sentences, loaded.model)
    n_tokens = sum(len(s) for s in sentences)
    identity = {
        "schema_version": run_files.SCHEMA_VERSION,
        "model": model_identity(loaded, adapter.family),
        "corpus": {"sha256": corpus_data.sha256, "text_column": corpus_data.text_column},
        "selection": {"max_tokens": max_tokens, "max_sentences": max_sentences, "seed": seed,
                      "max_length": length_limit},
        "dtype": dtype,
        **({"head_update": True} if head_update else {}),
    }
    run_fingerprint = fingerprint(identity)
    plan = plan_directory(Path(out), run_fingerprint, overwrite)
    if plan is DirectoryPlan.REUSE:
        logger.info("%s already holds this run; reusing it", out)
        return ExtractionResult(open_stored_run(out), "reused", time.perf_counter() - started)
    layout = StoreLayout(shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.head_dim, n_tokens, dtype,
                         head_update)
    writer = RunWriter(Path(out), run_fingerprint, layout, resume=plan is DirectoryPlan.RESUME)
    resumed = writer.tokens_done > 0
    try:
        settings = capture_sentences(loaded, adapter, shape, sentences, writer, batch_size, progress)
    finally:
        writer.close()
    if any(settings[layer].causal != adapter.causal for layer in settings):
        raise RuntimeError(f"{adapter.family} layers disagree with the family's causality")
    tokens = token_table(sentences, loaded.tokenizer)
    manifest = run_manifest(identity, loaded, adapter, shape, settings, tokens, corpus_source=corpus_data.source,
                            n_corpus_items=len(corpus_data.sentences), n_sentences=len(sentences),
                            n_truncated=sum(s.truncated for s in sentences))
    manifest["extraction"] = {"device": device, "batch_size": batch_size}
    logit_parts = capture_logit_parts(loaded.model, adapter, shape, max(len(s) for s in sentences),
                                      pad_token_id(loaded.tokenizer), device,
                                      used_token_ids=np.unique(tokens.token_id.to_numpy()))
    manifest["logit_parts"] = sorted(logit_parts)
    writer.finish(manifest, tokens, sentence_table(sentences), logit_parts)
    seconds = time.perf_counter() - started
    result = ExtractionResult(open_stored_run(out), "resumed" if resumed else "extracted", seconds)
    run = result.run
    logger.info("%s: %s %d sentences, %d tokens, %d layers x %d heads (%d key-value heads) in %.1f s", out,
                "resumed and finished" if resumed else "extracted", run.n_sentences, run.n_tokens, run.n_layers,
                run.n_heads, run.n_kv_heads, seconds)
    if result.n_truncated:
        logger.warning("%d sentences were longer than the model allows and were truncated", result.n_truncated)
    return result


def _check_options(dtype: str, batch_size: int, max_tokens, max_sentences, max_length) -> None:
    if dtype not in STORED_DTYPES:
        raise QkvizError(f"--dtype {dtype} is not one of {', '.join(STORED_DTYPES)}")
    for name, value in (("--batch-size", batch_size), ("--max-tokens", max_tokens),
                        ("--max-sentences", max_sentences), ("--max-length", max_length)):
        if value is not None and value < 1:
            raise QkvizError(f"{name} must be a positive number, got {value}")


def _length_limit(model_limit: int | None, requested: int | None) -> int | None:
    if requested is not None and model_limit is not None and requested > model_limit:
        raise QkvizError(f"--max-length {requested} is longer than the model allows ({model_limit})")
    return requested if requested is not None else model_limit


def _check_room_for_text(tokenizer, length_limit: int | None) -> None:
    """A ``--max-length`` that leaves no token for text after the model's special tokens is refused (a
    tokenizer cannot truncate below them, and would silently ignore the limit)."""
    special = tokenizer.num_special_tokens_to_add(pair=False)
    if length_limit is not None and length_limit <= special:
        raise QkvizError(f"--max-length {length_limit} leaves no room for text: the tokenizer adds {special} special "
                         f"tokens to every sentence; use at least {special + 1}")
