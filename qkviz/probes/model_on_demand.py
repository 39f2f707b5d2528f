"""The model a run was extracted from, loaded when an explanation first needs it.

A run made from a bundled model or a saved model directory names it in its manifest (``model.id``); that model is
loaded on first use and kept in the process's model memory (:mod:`qkviz.probes.model_cache`: least recently used
first out, under a budget in bytes), reloaded when needed after it was dropped. A notebook passes its model object
(``model=``), which qkviz never keeps: its identity hashes are cached by weak reference, so a model the user drops is
freed. Either way the model must be the run's own: its weights and configuration hash to what the run recorded, or
the explanation is refused in one line (an explanation of other weights would not split the stored logits).
"""

from __future__ import annotations

import logging
import weakref
from pathlib import Path

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.probes.model_cache import MODELS, estimated_bytes
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: (model id, device) of the causal runs' models whose checkpoints hold no language-model head
_HEADLESS: set[tuple[str, str]] = set()
#: model object -> the identity hashes computed for it, for as long as the object lives (a weak reference: a model the
#: user drops is freed, and its entry with it)
_IDENTITIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: model id -> its tokenizer (small; kept for the process)
_TOKENIZERS: dict[str, object] = {}


def _identity(model, family: str) -> dict:
    from types import SimpleNamespace

    from qkviz.extraction.writing import model_identity

    known = _IDENTITIES.get(model)
    if known is None:
        known = _IDENTITIES[model] = model_identity(SimpleNamespace(model=model), family)
    return known


def _check_same_model(run: StoredRun, model, where: str) -> None:
    recorded = run.manifest.get("model", {})
    family = recorded.get("family", "")
    identity = _identity(model, family)
    for key in ("weights_sha256", "config_sha256"):
        if recorded.get(key) and identity[key] != recorded[key]:
            what = "weights" if key == "weights_sha256" else "configuration"
            raise QkvizError(f"{where} is not the model run {run.path} was extracted from (its {what} differ); "
                             "pass the run's own model (model=)")


def run_model(run: StoredRun, model=None, device: str = "cpu", purpose: str = "attribution"):
    """The run's model, in eval mode: ``model`` if given (checked to be the run's own), else the model the manifest
    names, loaded into the process's model memory (or found there). A run whose model cannot be found is refused in
    one line that names what was looked for. ``purpose``: what the model is loaded for, named by the log line of its
    loading (``"attribution"``, ``"ablation"``, ``"the repeated-token probe"``, ...)."""
    if run.is_image_run:
        raise QkvizError(f"run {run.path} is an image run; query-key attribution splits text runs' logits")
    if model is not None:
        _check_same_model(run, model, f"the model given ({type(model).__name__})")
        return model.eval()
    spec = _loadable_spec(run)
    language_model = MODELS.get((spec, device, "lm"))
    if language_model is not None:
        return language_model.base_model
    from qkviz.extraction import load_model

    def load():
        logger.info("loading %s for %s", spec, purpose)
        loaded = _loaded(run, spec, load_model, device)
        _check_same_model(run, loaded.model, f"model {spec!r}")
        return loaded.model

    return MODELS.load((spec, device, "base"), load, f"{spec} ({device})", _estimate(run, spec))


def _estimate(run: StoredRun, spec: str) -> int:
    """The model's size once loaded, from its weight files (0 where they cannot be read); a model directory gone
    since the run was made is refused in one line."""
    from qkviz.extraction.models import model_directory

    try:
        directory, _source = model_directory(spec)
    except QkvizError as error:
        raise QkvizError(f"run {run.path}: its model {spec!r} cannot be loaded ({error}); pass it as model=") \
            from None
    try:
        return estimated_bytes(directory)
    except (OSError, ValueError):
        return 0


def served_model_memory(runs: list[StoredRun]) -> int | None:
    """Twice the largest of the runs' own models, estimated from their weight files: the server's default model
    memory budget. A model not on disk yet (a bundled GGUF model before its first conversion) or one that cannot be
    found counts for nothing here (the budget then grows with the models loaded); None where none can be read."""
    from qkviz.extraction import BUNDLED_MODELS
    from qkviz.extraction.models import model_directory

    sizes = []
    for run in runs:
        try:
            spec = _loadable_spec(run)
            bundled = BUNDLED_MODELS.get(spec)
            if bundled is not None and bundled.gguf_file and not (bundled.converted / "config.json").exists():
                continue
            sizes.append(estimated_bytes(model_directory(spec)[0]))
        except (QkvizError, OSError, ValueError):
            continue
    largest = max(sizes, default=0)
    return 2 * largest if largest else None


def _loaded(run: StoredRun, spec: str, loader, device: str):
    """``loader(spec, device=device)``, its failure one line naming the run and ``model=``."""
    try:
        return loader(spec, device=device)
    except QkvizError as error:
        raise QkvizError(f"run {run.path}: its model {spec!r} cannot be loaded ({error}); pass it as model=") \
            from None


def run_language_model(run: StoredRun, model=None, device: str = "cpu", purpose: str = "ablation"):
    """The run's model with its language-model head where it has one, for the next-token loss (ablation).

    ``model`` if given (it, or its base model, checked to be the run's own). Else, for a causal run, the model the
    manifest names loaded as a causal language model into the process's model memory (its base model checked to be
    the run's own, and serving :func:`run_model` while it is held); an encoder run, or a checkpoint saved without its
    head, gets :func:`run_model`'s base model. ``purpose``: as :func:`run_model`'s."""
    if run.is_image_run:
        raise QkvizError(f"run {run.path} is an image run; ablation runs text runs' models")
    if model is not None:
        base = getattr(model, "base_model", model)
        try:
            _check_same_model(run, model, f"the model given ({type(model).__name__})")
        except QkvizError:
            if base is model:
                raise
            _check_same_model(run, base, f"the model given ({type(model).__name__})")
        return model.eval()
    if not run.is_causal:
        return run_model(run, None, device, purpose)
    spec = _loadable_spec(run)
    if (spec, device) in _HEADLESS:
        return run_model(run, None, device, purpose)
    held = MODELS.get((spec, device, "lm"))
    if held is not None:
        return held
    from qkviz.extraction.models import load_language_model

    def load():
        logger.info("loading %s with its language-model head for %s", spec, purpose)
        language_model = _loaded(run, spec, load_language_model, device)
        if language_model is not None:
            _check_same_model(run, language_model.base_model, f"model {spec!r}")
        return language_model

    estimate = _estimate(run, spec)
    MODELS.drop((spec, device, "base"), "its language model, loaded now, serves in its place")
    try:
        return MODELS.load((spec, device, "lm"), _or_headless(load, spec, device), f"{spec} with its head ({device})",
                           estimate)
    except _Headless:
        return run_model(run, None, device, purpose)


class _Headless(Exception):
    """The checkpoint holds no language-model head."""


def _or_headless(load, spec: str, device: str):
    def loaded():
        language_model = load()
        if language_model is None:
            _HEADLESS.add((spec, device))
            raise _Headless
        return language_model
    return loaded


def _loadable_spec(run: StoredRun) -> str:
    """The model id the manifest names, if qkviz can load it (a bundled name or a model directory here)."""
    recorded = run.manifest.get("model", {})
    spec = str(recorded.get("id", ""))
    if recorded.get("in_memory"):
        raise QkvizError(f"run {run.path} was extracted from a model in memory ({recorded.get('class')}, "
                         f"{recorded.get('name_or_path') or 'no name or path'}); pass it as model=")
    from qkviz.extraction import BUNDLED_MODELS

    if spec not in BUNDLED_MODELS and not Path(spec).expanduser().is_dir():
        raise QkvizError(f"run {run.path}: its model {spec!r} is neither a bundled model "
                         f"({', '.join(BUNDLED_MODELS)}) nor a model directory here; pass it as model=")
    return spec


def sequence_ids(run: StoredRun, sentence: int, up_to: int | None = None) -> np.ndarray:
    """The token ids of one of the run's sequences, as the extraction fed them to the model. ``up_to``: a causal
    model's tokens after that position change nothing before it, so its pass stops there (positions ``0..up_to``)."""
    rows = run.sentence_tokens(sentence)
    ids = run.tokens.token_id.to_numpy()[rows]
    return ids[:up_to + 1] if up_to is not None and run.is_causal else ids


def run_tokenizer(run: StoredRun, tokenizer=None):
    """The run's tokenizer: ``tokenizer`` if given, else the one saved with the model the manifest names, loaded once
    per process (a run of a model in memory is refused in one line: pass ``tokenizer=``)."""
    if tokenizer is not None:
        return tokenizer
    try:
        spec = _loadable_spec(run)
    except QkvizError as error:
        raise QkvizError(f"{error} (or tokenizer=)") from None
    if spec not in _TOKENIZERS:
        from transformers import AutoTokenizer

        from qkviz.extraction.models import model_directory

        directory, _source = model_directory(spec)
        try:
            _TOKENIZERS[spec] = AutoTokenizer.from_pretrained(directory)
        except (OSError, ValueError) as error:
            raise QkvizError(f"run {run.path}: the tokenizer of {spec!r} cannot be loaded ({error}); pass it as "
                             "tokenizer=") from None
    return _TOKENIZERS[spec]
