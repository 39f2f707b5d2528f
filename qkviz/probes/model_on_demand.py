"""The model a run was extracted from, loaded when an explanation first needs it, once per process.

A run made from a bundled model or a saved model directory names it in its manifest (``model.id``); that model is
loaded on first use and kept for the rest of the process. A notebook passes its model object (``model=``). Either
way the model must be the run's own: its weights and configuration hash to what the run recorded, or the
explanation is refused in one line (an explanation of other weights would not split the stored logits).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: (model id, device) -> the loaded model, for the life of the process; (model id, device, "lm") -> its causal
#: language model (:func:`run_language_model`), whose base model then serves :func:`run_model` too
_LOADED: dict[tuple, object] = {}
#: (model id, device) of the causal runs' models whose checkpoints hold no language-model head
_HEADLESS: set[tuple[str, str]] = set()
#: id(model object) -> (the model, the identity hashes computed for it); the model is kept so that its id is not
#: reused by another object
_IDENTITIES: dict[int, tuple[object, dict]] = {}


def _identity(model, family: str) -> dict:
    from types import SimpleNamespace

    from qkviz.extraction.writing import model_identity

    known = _IDENTITIES.get(id(model))
    if known is None or known[0] is not model:
        known = _IDENTITIES[id(model)] = (model, model_identity(SimpleNamespace(model=model), family))
    return known[1]


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
    names, loaded once per process. A run whose model cannot be found is refused in one line that names what was
    looked for. ``purpose``: what the model is loaded for, named by the log line of its loading
    (``"attribution"``, ``"ablation"``, ``"the repeated-token probe"``, ...)."""
    if run.is_image_run:
        raise QkvizError(f"run {run.path} is an image run; query-key attribution splits text runs' logits")
    if model is not None:
        _check_same_model(run, model, f"the model given ({type(model).__name__})")
        return model.eval()
    spec = _loadable_spec(run)
    key = (spec, device)
    if key in _LOADED:
        return _LOADED[key]
    if (spec, device, "lm") in _LOADED:
        return _LOADED[(spec, device, "lm")].base_model
    from qkviz.extraction import load_model

    logger.info("loading %s for %s (once per process)", spec, purpose)
    loaded = _loaded(run, spec, load_model, device)
    _check_same_model(run, loaded.model, f"model {spec!r}")
    _LOADED[key] = loaded.model
    return loaded.model


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
    manifest names loaded as a causal language model once per process (its base model checked to be the run's own);
    an encoder run, or a checkpoint saved without its head, gets :func:`run_model`'s base model. ``purpose``: as
    :func:`run_model`'s."""
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
    key = (spec, device, "lm")
    if (spec, device) in _HEADLESS:
        return run_model(run, None, device, purpose)
    if key not in _LOADED:
        from qkviz.extraction.models import load_language_model

        logger.info("loading %s with its language-model head for %s (once per process)", spec, purpose)
        language_model = _loaded(run, spec, load_language_model, device)
        if language_model is None:
            _HEADLESS.add((spec, device))
            return run_model(run, None, device, purpose)
        _check_same_model(run, language_model.base_model, f"model {spec!r}")
        _LOADED[key] = language_model
    return _LOADED[key]


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
    key = (spec, "tokenizer")
    if key not in _LOADED:
        from transformers import AutoTokenizer

        from qkviz.extraction.models import model_directory

        directory, _source = model_directory(spec)
        try:
            _LOADED[key] = AutoTokenizer.from_pretrained(directory)
        except (OSError, ValueError) as error:
            raise QkvizError(f"run {run.path}: the tokenizer of {spec!r} cannot be loaded ({error}); pass it as "
                             "tokenizer=") from None
    return _LOADED[key]
