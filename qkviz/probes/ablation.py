"""Whether a head matters: the run's model over the run's own sequences, clean and with the head's output removed.

:func:`ablate` feeds the model exactly the sequences the run stored (each sentence's token ids, special tokens
included; a long document's windows as they were stored) and compares, per token, the model run clean with the
model run with head ``(layer, head)`` ablated (:mod:`qkviz.probes.head_ablation`):

* ``mode="zero"``: the head's slice of its layer's output projection input is set to zero;
* ``mode="mean"``: it is set to its mean over the real tokens of the sequences ablated (the whole run, or the
  ``sentences`` given).

A causal run's model is loaded with its language-model head (:func:`qkviz.probes.model_on_demand.run_language_model`)
and the change is in the next-token loss (nats). An encoder, or a model without its head, has no next-token loss:
the change is the relative change of the last hidden state, ``||h_ablated - h_clean|| / ||h_clean||``, and the
``measure`` column says so.
"""

from __future__ import annotations

import logging
import weakref
from collections import OrderedDict

import numpy as np
import pandas as pd

from qkviz.core.errors import QkvizError
from qkviz.probes.model_on_demand import run_language_model
from qkviz.probes.model_on_demand import sequence_ids
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: the clean next-token losses of the last few (run, model, sentences) ablated: another head of the same run spares its
#: clean pass (half the work in zero mode)
_CLEAN: OrderedDict[tuple, tuple[weakref.ref, list]] = OrderedDict()      # (a weak reference to the model, losses)
CLEAN_KEPT = 4

#: the columns of :func:`ablate`'s frame
ABLATION_COLUMNS = ("token_index", "sentence", "position", "token", "loss", "ablated_loss", "change", "measure")


def _sentences(run: StoredRun, sentences) -> list[int]:
    if sentences is None:
        return list(range(run.n_sentences))
    chosen = []
    for sentence in [sentences] if isinstance(sentences, (int, np.integer)) else list(sentences):
        if isinstance(sentence, (bool, np.bool_)) or not isinstance(sentence, (int, np.integer)):
            raise QkvizError(f"sentences must be sentence numbers of the run, got {sentence!r}")
        if not 0 <= int(sentence) < run.n_sentences:
            raise QkvizError(f"sentence {sentence} is outside the run's {run.n_sentences} sentences "
                             f"(0..{run.n_sentences - 1})")
        chosen.append(int(sentence))
    if not chosen:
        raise QkvizError("sentences is empty; give sentence numbers of the run, or leave it out for all")
    return sorted(set(chosen))


def ablate(run: StoredRun, layer: int, head: int, mode: str = "zero", *, model=None, device: str = "cpu",
           sentences=None, progress: bool = False) -> pd.DataFrame:
    """What removing head ``(layer, head)`` changes, per token of the run (see the module).

    One row per token of the run (of ``sentences`` when given): ``token_index`` (its row of ``run.tokens``),
    ``sentence``, ``position``, ``token``, ``loss`` (the clean next-token loss, nats), ``ablated_loss`` and
    ``change`` (``ablated_loss - loss``); NaN at a sequence's last token, which has no next token. ``measure`` is
    ``"next-token loss"``, or ``"hidden-state change"`` for an encoder (then ``change`` is the relative change of
    the last hidden state and the losses are NaN). ``attrs`` holds ``layer``, ``head``, ``mode``, ``measure`` and
    ``mean_change`` (the mean change over the tokens that have one)."""
    from qkviz.probes.head_ablation import ABLATION_MODES, ablation_losses

    run.check_head(layer, head)
    if mode not in ABLATION_MODES:
        raise QkvizError(f"mode must be one of {', '.join(ABLATION_MODES)}, got {mode!r}")
    chosen = _sentences(run, sentences)
    model = run_language_model(run, model, device)
    key = (str(run.path), run.manifest.get("fingerprint"), id(model), tuple(chosen))
    known = _CLEAN.get(key)
    clean = known[1] if known is not None and known[0]() is model else None
    result = ablation_losses(model, [sequence_ids(run, sentence) for sentence in chosen], (layer, head), mode,
                             clean=clean, progress=progress)
    if result.measure == "next-token loss":
        _CLEAN[key] = (weakref.ref(model), result.clean)
        _CLEAN.move_to_end(key)
        while len(_CLEAN) > CLEAN_KEPT:
            _CLEAN.popitem(last=False)
    rows = np.concatenate([np.arange(run.sentence_tokens(s).start, run.sentence_tokens(s).stop) for s in chosen])
    tokens = run.tokens
    frame = pd.DataFrame({
        "token_index": rows, "sentence": tokens.sentence.to_numpy()[rows], "position": tokens.position.to_numpy()[rows],
        "token": tokens.token.to_numpy()[rows], "loss": np.concatenate(result.clean),
        "ablated_loss": np.concatenate(result.ablated), "change": np.concatenate(result.change),
        "measure": result.measure})
    mean_change = float(np.nanmean(frame.change)) if frame.change.notna().any() else float("nan")
    frame.attrs.update(layer=int(layer), head=int(head), mode=mode, measure=result.measure, mean_change=mean_change)
    logger.debug("%s", ablation_summary(frame))     # the result is the caller's to show (the CLI prints this line)
    return frame


def ablation_summary(frame: pd.DataFrame) -> str:
    """One line: the head, the mode, what is measured and its mean change over the tokens (from :func:`ablate`):
    ``L18H6 zero-ablated: mean next-token loss change +0.0412 nats over 995 tokens``, or for an encoder
    ``L3H4 zero-ablated: mean hidden-state change +0.1097 over 1,500 tokens``."""
    attrs = frame.attrs
    measure = attrs["measure"]
    unit = " nats" if measure == "next-token loss" else ""
    change = measure if measure.endswith("change") else f"{measure} change"
    return (f"L{attrs['layer']}H{attrs['head']} {attrs['mode']}-ablated: mean {change} "
            f"{attrs['mean_change']:+.4g}{unit} over {int(frame.change.notna().sum()):,} tokens")


def most_affected(frame: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """The ``top`` rows of :func:`ablate`'s frame with the largest change (the loss most raised, or the hidden state
    most moved), largest first."""
    return frame[frame.change.notna()].sort_values("change", ascending=False, kind="stable").head(top)
