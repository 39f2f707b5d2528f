"""``qkviz extract``: from a model and a corpus (text or images) to a complete run directory.

Every run is written by one path, :func:`write_run`: the run is identified by a fingerprint of
everything that determines its numbers (the model's weights and configuration, the corpus, the
selection, the stored precision); the same inputs reuse the run, an interrupted run with the same
inputs resumes, and different inputs into an existing run directory are refused unless
``overwrite``. The vectors are streamed by a :class:`qkviz.store.run_writer.RunWriter`, which writes
the tables and extra arrays, checksums every file, and writes the manifest last.

What differs between text and images is a :class:`RunInput`, supplied by
:class:`qkviz.extraction.writing.text_input.TextInput` (tokenising and selecting sentences) or
:class:`qkviz.extraction.writing.image_input.ImageInput` (processing images; the token table's patch
columns, the manifest's image layout, the patch thumbnails).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np
import pandas as pd

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option, option_with_n
from qkviz.extraction.adapters import FamilyAdapter, model_adapter
from qkviz.extraction.models.borrowed_model import model_for_extraction
from qkviz.extraction.capture.recorder import LayerAttentionSettings
from qkviz.extraction.inputs.corpus import load_corpus
from qkviz.extraction.gate.exactness_gate import GateResult
from qkviz.extraction.inputs.image_corpus import is_image_source, load_images
from qkviz.extraction.writing.image_input import ImageInput
from qkviz.extraction.models.model_boundary import (CAPTURE, DISCOVERY, GATE, IDENTITY, LOGIT_PARTS, OutOfMemory,
                                            model_step)
from qkviz.extraction.models.loading import LoadedModel
from qkviz.extraction.capture.own_code_capture import passes_alone
from qkviz.extraction.writing.run_manifest import ExtractionResult, fingerprint, identity_in_background, run_manifest
from qkviz.extraction.writing.text_input import TextInput
from qkviz.store import files as run_files
from qkviz.store.locks import exclusive_lock
from qkviz.store.run import StoredRun, open_stored_run
from qkviz.store.run_writer import DirectoryPlan, RunWriter, StoreLayout, plan_directory, remove_run

logger = logging.getLogger(__name__)

STORED_DTYPES = ("float16", "float32")

#: the steps of an extraction whose wall seconds :class:`ExtractionResult` ``steps`` gives: reading the corpus, loading
#: the model, tokenizing and selecting, waiting for the weights' hash (computed meanwhile), the exactness gate, the
#: logit parts, the capture (the forward passes with every query and key stored), the tables and manifest, and the
#: last writes (tables, arrays, checksums, manifest)
STEPS = ("corpus", "model", "select", "hash", "gate", "logit_parts", "capture", "tables", "finish")


@contextlib.contextmanager
def timed(steps: dict[str, float], step: str) -> Iterator[None]:
    """Add the wall seconds of the block to ``steps[step]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        steps[step] = steps.get(step, 0.0) + time.perf_counter() - start


def extract_run(model, corpus, out: str | Path, *, tokenizer=None, processor=None, max_tokens: int | None = None,
                max_sentences: int | None = None, seed: int = 0, dtype: str = "float32", batch_size: int = 16,
                max_length: int | None = None, chunk: int | None = None, chunk_overlap: int | None = None,
                device: str | None = None, text_column: str = "text", overwrite: bool = False,
                head_update: bool = False, progress: bool = False, output_norms: bool = True) -> ExtractionResult:
    """Extract every head's queries, keys and value norms over ``corpus`` into the run ``out``;
    with ``head_update``, also each head's update relative to the hidden state per token
    (:mod:`qkviz.extraction.streaming.head_update_capture`). ``model`` is a name or directory, or a model object with
    ``tokenizer`` (an image model: ``processor``; :mod:`qkviz.extraction.models.borrowed_model`); ``corpus`` a file or
    dataset name, or an iterable of strings (:func:`qkviz.extraction.inputs.corpus.load_corpus`), or images
    (:func:`qkviz.extraction.inputs.image_corpus.load_images`: a folder, a list file, ``imagefolder:DIR``, PIL
    images or arrays; :mod:`qkviz.extraction.writing.image_input`). ``max_length`` truncates a longer text; ``chunk``
    splits it into windows of that many tokens sharing ``chunk_overlap`` (default ``chunk // 8``;
    :mod:`qkviz.extraction.inputs.long_documents`); without either, a text longer than the model's context is
    refused with its count. ``device`` None: ``"cpu"`` for a name, where
    the model object is for an object. One extraction writes a run directory at a time: a second one into
    the same ``out`` is refused while the first runs. ``output_norms=False`` leaves out every head's ``|W_O^h v_j|``
    (:mod:`qkviz.extraction.streaming.output_norms`; the benches time their cost with it)."""
    out = Path(out)
    started = time.perf_counter()
    _check_options(dtype, batch_size, max_tokens, max_sentences, max_length)
    _check_long_text_options(max_length, chunk, chunk_overlap)
    images = is_image_source(corpus)
    if images and (max_length is not None or chunk is not None):
        given = f"{option('max_length', None)} truncates" if max_length is not None else f"{option('chunk', None)} splits"
        raise QkvizError(f"{given} sentences; an image is always all its patches (leave it out)")
    steps: dict[str, float] = {}
    with timed(steps, "corpus"):
        corpus_data = load_images(corpus) if images else load_corpus(corpus, text_column)
    loading = time.perf_counter()
    with exclusive_lock(out.parent / f".{out.name}.lock", wait=False,
                        busy_message=f"another qkviz extract is writing {out}; wait for it to finish"), \
            model_for_extraction(model, tokenizer, device, progress, processor=processor,
                                 modality="image" if images else "text") as loaded:
        steps["model"] = time.perf_counter() - loading
        with model_step(family_name(loaded.model), DISCOVERY):
            adapter = model_adapter(loaded.model)
        with model_step(adapter.family, IDENTITY):
            hashing = identity_in_background(loaded, adapter.family)     # hashed while the corpus is tokenized
        limits = dict(max_tokens=max_tokens, max_sentences=max_sentences, seed=seed)
        with timed(steps, "select"):
            run_input = (ImageInput.select(loaded, adapter, corpus_data, **limits) if images else
                         TextInput.select(loaded, adapter, corpus_data, max_length=max_length, chunk=chunk,
                                          chunk_overlap=chunk_overlap, **limits))
        return write_run(loaded, adapter, run_input, out, started, dtype=dtype, batch_size=batch_size,
                         overwrite=overwrite, head_update=head_update, progress=progress, output_norms=output_norms,
                         hashing=hashing, steps=steps)


class RunInput(Protocol):
    """What one kind of input (text, images) supplies to :func:`write_run`: its part of the run's identity,
    its counts, its forward loop, its tables and its arrays beside the vectors."""

    corpus: dict           # the identity's "corpus": what of the corpus the numbers depend on
    selection: dict        # the identity's "selection": how the sequences were chosen
    source: str            # the corpus as given (the manifest's corpus "source")
    n_corpus_items: int    # sentences or images in the corpus
    n_sequences: int       # sentences or images in the run
    n_tokens: int
    n_truncated: int

    def check_exactness(self) -> GateResult:
        """The exactness gate on the input's first batch (:mod:`qkviz.extraction.gate.exactness_gate`): a one-line
        refusal where qkviz cannot reproduce the model's attention."""

    def capture(self, writer: RunWriter, batch_size: int, progress: bool) -> dict[int, LayerAttentionSettings]:
        """Stream every sequence not yet on disk through ``writer``; each layer's attention settings."""

    def token_table(self) -> pd.DataFrame:
        """One row per token in storage order (``qkviz.store.run.TOKEN_COLUMNS``, and the input's own)."""

    def sequence_table(self) -> pd.DataFrame:
        """One row per sentence or image (``qkviz.store.run.SENTENCE_COLUMNS``, and the input's own)."""

    def manifest_input(self) -> dict | None:
        """The manifest's ``input`` (how an image's tokens are laid out), or None."""

    def logit_parts(self) -> dict[str, np.ndarray]:
        """``{run file: array}`` of what the logit decomposition needs from the model (taken before the capture,
        so that a model failing here leaves nothing written)."""

    def extra_arrays(self) -> dict[str, np.ndarray]:
        """``{run file: array}`` of the input's own arrays (the patch thumbnails)."""

    def summary(self, run: StoredRun) -> str:
        """What was extracted, for the log line."""


def write_run(loaded: LoadedModel, adapter: FamilyAdapter, run_input: RunInput, out: Path, started: float, *,
              dtype: str, batch_size: int, overwrite: bool, head_update: bool, progress: bool,
              output_norms: bool = True, hashing: Future | None = None,
              steps: dict[str, float] | None = None) -> ExtractionResult:
    """Write the run of ``run_input`` into ``out``: reuse, resume or refuse what is there (see the module),
    stream the vectors, then the tables, the arrays and the manifest last. Every step that runs the model's own
    code sits behind :func:`~qkviz.extraction.models.model_boundary.model_step`; all of them but the capture run before
    anything is written, and a refused capture of a fresh run removes what it wrote. ``hashing``: the model's
    :func:`~qkviz.extraction.writing.run_manifest.model_identity` already under way (:func:`identity_in_background`);
    ``steps``: the seconds of the steps before this one (:data:`STEPS`), which the result's ``steps`` continue."""
    steps = {} if steps is None else steps
    device = str(next(loaded.model.parameters()).device)
    shape = adapter.shape(loaded.model.config)
    if hashing is None:
        with model_step(adapter.family, IDENTITY):
            hashing = identity_in_background(loaded, adapter.family)
    # An empty or absent directory is a fresh run whatever the fingerprint: there the checks run while the weights are
    # still being hashed (none changes a weight in place: the gate's float32 lift replaces them and puts them back).
    checked = _checks_before_writing(adapter, run_input, head_update, steps) if _is_empty(out) else None
    with model_step(adapter.family, IDENTITY), timed(steps, "hash"):
        model_hashes = hashing.result()
    identity = {
        "schema_version": run_files.SCHEMA_VERSION,
        "model": model_hashes,
        "corpus": run_input.corpus,
        "selection": run_input.selection,
        "dtype": dtype,
        **({"head_update": True} if head_update else {}),
    }
    run_fingerprint = fingerprint(identity)
    plan = plan_directory(out, run_fingerprint, overwrite)
    if plan is DirectoryPlan.REUSE:
        logger.info("%s already holds this run; reusing it", out)
        return ExtractionResult(open_stored_run(out), "reused", time.perf_counter() - started, _in_order(steps))
    gate, parts = checked or _checks_before_writing(adapter, run_input, head_update, steps)
    _log_layer_mapping(adapter, shape)
    no_output_norms = gate.no_output_norms if output_norms else "the extraction was asked for none (output_norms=False)"
    layout = StoreLayout(shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.head_dim, run_input.n_tokens, dtype,
                         head_update, output_norms=no_output_norms is None)
    if no_output_norms is not None:
        logger.info("%s: no output norms |W_O v| in this run: %s", adapter.family, no_output_norms)
    if batch_size > 1 and passes_alone(loaded.model):
        logger.info("%s's own attention code reads the padding beside a sentence: each sentence passes alone "
                    "(batch size 1), so that its queries and keys are its own", adapter.family)
        batch_size = 1
    existed = out.exists()
    writer = RunWriter(out, run_fingerprint, layout, resume=plan is DirectoryPlan.RESUME)
    resumed = writer.tokens_done > 0
    settings = _stream_vectors(adapter, run_input, writer, batch_size, progress, steps,
                               remove_on_refusal=(out, existed) if plan is DirectoryPlan.FRESH else None)
    with timed(steps, "tables"):
        tokens = run_input.token_table()
        manifest = run_manifest(identity, loaded, adapter, shape, settings, tokens, corpus_source=run_input.source,
                                n_corpus_items=run_input.n_corpus_items, n_sentences=run_input.n_sequences,
                                n_truncated=run_input.n_truncated)
        if (described := run_input.manifest_input()) is not None:
            manifest["input"] = described
        manifest["extraction"] = {"device": device, "batch_size": batch_size, "exactness_gate": gate.as_manifest()}
        manifest["logit_parts"] = sorted(parts)
        manifest["output_norms"] = ({"stored": True} if layout.output_norms
                                    else {"stored": False, "why": no_output_norms})
        sequences, arrays = run_input.sequence_table(), {**parts, **run_input.extra_arrays()}
    with timed(steps, "finish"):
        writer.finish(manifest, tokens, sequences, arrays)
    return _finished(out, run_input, resumed, started, steps)


def _log_layer_mapping(adapter: FamilyAdapter, shape) -> None:
    """Say how the run's layers map to the model's, where they are not one to one."""
    if adapter.layer_indices is not None and len(set(adapter.layer_indices)) < len(adapter.layer_indices):
        logger.info("%s calls a shared layer %d times: the run's layer i is its i-th call (model layers %s, the "
                    "manifest's shape.model_layers)", adapter.family, shape.n_layers,
                    ", ".join(map(str, adapter.layer_indices)))
    elif adapter.layer_indices is not None:
        logger.info("%s mixes attention with other layers: the run's layers 0-%d are its attention layers, model "
                    "layers %s (the manifest's shape.model_layers)", adapter.family, shape.n_layers - 1,
                    ", ".join(map(str, adapter.layer_indices)))


def _stream_vectors(adapter: FamilyAdapter, run_input: RunInput, writer: RunWriter, batch_size: int, progress: bool,
                    steps: dict[str, float], remove_on_refusal: tuple[Path, bool] | None):
    """Stream the input's vectors into ``writer`` behind the capture's model boundary and return the layers'
    attention settings. A refused capture of a fresh run (``remove_on_refusal``: its directory, and whether it existed
    before) removes what it wrote, but not on running out of memory."""
    try:
        with model_step(adapter.family, CAPTURE), timed(steps, "capture"):
            settings = run_input.capture(writer, batch_size, progress)
    except QkvizError as refused:
        writer.close()
        if remove_on_refusal is not None and not isinstance(refused, OutOfMemory):
            _remove_fresh_run(*remove_on_refusal)
        raise
    finally:
        writer.close()
    writer.checksum_arrays()        # in the background, while the tables are built
    return settings


def _finished(out: Path, run_input: RunInput, resumed: bool, started: float, steps: dict[str, float]) -> ExtractionResult:
    """The finished run's result, logged."""
    seconds = time.perf_counter() - started
    result = ExtractionResult(open_stored_run(out), "resumed" if resumed else "extracted", seconds, _in_order(steps))
    logger.info("%s: %s %s in %.1f s", out, "resumed and finished" if resumed else "extracted",
                run_input.summary(result.run), seconds)
    logger.debug("extraction steps: %s", ", ".join(f"{step} {spent:.2f} s" for step, spent in result.steps.items()))
    if result.n_truncated:
        logger.warning("%d sentences were longer than the model allows and were truncated", result.n_truncated)
    return result


def _is_empty(directory: Path) -> bool:
    """Whether ``directory`` is absent or empty (its plan is then a fresh run, whatever the run's fingerprint)."""
    return not directory.exists() or (directory.is_dir() and not any(directory.iterdir()))


def _checks_before_writing(adapter: FamilyAdapter, run_input: RunInput, head_update: bool,
                           steps: dict[str, float]) -> tuple[GateResult, dict]:
    """What runs before anything is written: ``--head-update`` against the family, the exactness gate and the logit
    parts (each a refusal in one line where the model fails it); their seconds into ``steps``."""
    if head_update and not adapter.has_output_projection:
        raise QkvizError(f"{option('head_update')} needs the attention's output projection, which qkviz does not find in "
                         f"{adapter.family} models; extract without it")
    with model_step(adapter.family, GATE), timed(steps, "gate"):
        gate = run_input.check_exactness()          # before anything is written
    with model_step(adapter.family, LOGIT_PARTS), timed(steps, "logit_parts"):
        parts = run_input.logit_parts()
    return gate, parts


def _in_order(steps: dict[str, float]) -> dict[str, float]:
    """``steps`` in the order of :data:`STEPS`."""
    return {step: steps[step] for step in STEPS if step in steps}


def family_name(model) -> str:
    """The model's type as refusals name it (its class where the configuration has none)."""
    return str(getattr(model.config, "model_type", None) or type(model).__name__)


def _remove_fresh_run(out: Path, existed: bool) -> None:
    """What a refused capture wrote into a run directory that held nothing before it: the run's files, and the
    directory itself where this extraction made it."""
    if existed:
        remove_run(out)
    else:
        shutil.rmtree(out, ignore_errors=True)


def _check_options(dtype: str, batch_size: int, max_tokens, max_sentences, max_length) -> None:
    if dtype not in STORED_DTYPES:
        raise QkvizError(f"{option('dtype', dtype)} is not one of {', '.join(STORED_DTYPES)}")
    for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens),
                        ("max_sentences", max_sentences), ("max_length", max_length)):
        if value is not None and value < 1:
            raise QkvizError(f"{option(name, None)} must be a positive number, got {value}")


def _check_long_text_options(max_length, chunk, chunk_overlap) -> None:
    """``--chunk`` and ``--chunk-overlap`` on their own (against the model and tokenizer: ``TextInput.select``)."""
    if chunk is not None and max_length is not None:
        raise QkvizError(f"give {option('chunk', None)} (split long documents into windows) or "
                         f"{option('max_length', None)} (truncate them), not both")
    if chunk_overlap is not None and chunk is None:
        raise QkvizError(f"{option('chunk_overlap', None)} needs {option_with_n('chunk')} (the window size)")
    if chunk is not None and chunk < 2:
        raise QkvizError(f"{option('chunk', None)} must be at least 2 tokens, got {chunk}")
    if chunk_overlap is not None and not 0 <= chunk_overlap < chunk:
        raise QkvizError(f"{option('chunk_overlap', None)} must be from 0 to {option('chunk', None)} - 1 ({chunk - 1}), "
                         f"got {chunk_overlap}")
