"""Each induction and previous-token label checked causally: the head removed on the label's own probe
(``qkviz stats --ablate``).

A label measured on the repeated-random-tokens probe is checked there: the head's output is removed (zero ablation,
:func:`qkviz.extraction.ablation_losses`) and the change of the next-token loss is averaged over the second copy's
tokens, the ones an induction head helps predict. A label measured on the corpus (previous-token, the corpus's repeats)
is checked on the corpus: the mean change over the first :data:`CORPUS_TOKENS` tokens of a seeded random sample of its
sequences. Encoders without a language-model head give the relative change of the last hidden state instead, and say
so. The label table gains ``ablation_change`` (NaN for the labels not checked) and ``ablation_measure``.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from qkviz.analysis.labels import ABLATED_LABELS
from qkviz.probes.head_probes import ProbeSettings, probe_sequences
from qkviz.probes.model_on_demand import run_language_model
from qkviz.probes.model_on_demand import sequence_ids
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: the labels ``--ablate`` checks (each declared ``ablated`` in qkviz.analysis.labels.registry)
CHECKED_LABELS = ABLATED_LABELS
#: corpus tokens a corpus-measured label is checked on
CORPUS_TOKENS = 1000


def _corpus_sentences(run: StoredRun, seed: int) -> list[int]:
    order = np.random.default_rng(seed).permutation(run.n_sentences)
    lengths = run.sentences.n_tokens.to_numpy()[order]
    kept = order[:max(1, int(np.searchsorted(np.cumsum(lengths), CORPUS_TOKENS)) + 1)]
    return sorted(int(sentence) for sentence in kept)


def ablate_labels(run: StoredRun, labels: pd.DataFrame, *, model=None, device: str = "cpu",
                  settings: ProbeSettings = ProbeSettings(), progress: bool = False) -> pd.DataFrame:
    """``labels`` with ``ablation_change`` and ``ablation_measure``: each :data:`CHECKED_LABELS` row's mean change
    when its head is removed, on its probe (see the module)."""
    from qkviz.probes.head_ablation import ablation_losses

    model = run_language_model(run, model, device, "ablation of the labels' heads")
    checked = labels.label.isin(CHECKED_LABELS)
    on_probe = checked & labels.probe.str.startswith("repeated random tokens")
    changes = np.full(len(labels), np.nan)
    measures = np.full(len(labels), "", dtype=object)
    inputs = {}
    if on_probe.any():
        probe, _ = probe_sequences(run, getattr(model, "base_model", model), settings)
        second = np.arange(probe.prefix + probe.half, probe.prefix + 2 * probe.half - 1)   # each predicts the next
        inputs["probe"] = ([row for row in probe.ids], lambda change: np.stack(change)[:, second])
    if (checked & ~on_probe).any():
        sentences = _corpus_sentences(run, settings.seed)
        inputs["corpus"] = ([sequence_ids(run, sentence) for sentence in sentences], np.concatenate)
    clean = {}
    for number in np.flatnonzero(checked.to_numpy()):
        row = labels.iloc[number]
        where = "probe" if on_probe.iat[number] else "corpus"
        sequences, kept = inputs[where]
        result = ablation_losses(model, sequences, (int(row.layer), int(row["head"])), "zero", clean=clean.get(where),
                                 progress=progress)
        if result.measure == "next-token loss":      # a hidden-state change keeps no clean states to reuse
            clean[where] = result.clean
        changes[number] = float(np.nanmean(kept(result.change)))
        measures[number] = (f"zero ablation, mean {result.measure} change on the "
                            + ("probe's second copy" if where == "probe" else f"corpus (first {CORPUS_TOKENS:,} tokens "
                                                                              "of a seeded sample)"))
        logger.info("L%dH%d %s: %s %+.4g", int(row.layer), int(row["head"]), row.label, measures[number],
                    changes[number])
    return labels.assign(ablation_change=changes, ablation_measure=measures)
