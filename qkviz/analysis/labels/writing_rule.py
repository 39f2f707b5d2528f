"""The labels of what a head writes, ``copying`` and ``suppression``, from the copying probe's rows of the probe table
(:mod:`qkviz.probes.writing_probe`).

A head earns ``copying`` when its score (the mean share of a query's attention going to tokens whose write from
there ranks that same token among the head's top 5 of the candidates) reaches ``copy_share`` and ``over_chance``
times its chance (5 / the candidates); ``suppression`` the same with the bottom 5. It is earned on the
repeated-random-tokens probe, or on the corpus's own repeats (the ``-corpus`` rows, over ``min_queries`` queries or
more), like the attention-copying labels: what the head does on random tokens, or on the run's text. Both thresholds
were set from chance before any head was looked at: ``copy_share`` is the ``copying`` threshold of the attention
labels (0.3 of a query's attention), over a hundred times the chance of 2,000 candidates. The weights-only OV score,
the mean logit raise and the shuffled control's score are in ``detail``. The control (each source's own token swapped
for another candidate) is judged by the same rule with ``control=True``: a test checks that it earns none.
"""

from __future__ import annotations

import pandas as pd

from qkviz.analysis.labels.label_table import LABEL_COLUMNS
from qkviz.analysis.labels.registry import COPYING, WRITING_LABELS, LabelThresholds

#: the copying probe's rows besides the labels' own (qkviz.probes.writing_probe writes them)
SHUFFLED = "-shuffled"
WEIGHTS_ONLY = "copying-weights-only"
LOGIT_RAISE = "attended-logit-raise"
#: the rows of the corpus form (``copying-corpus``, ``copying-corpus-shuffled``, ``attended-logit-raise-corpus``)
CORPUS_FORM = "-corpus"


def _one(probes: pd.DataFrame, name: str) -> dict[tuple[int, int], float]:
    rows = probes[probes.probe == name]
    return {(int(row.layer), int(row.head)): float(row.score) for row in rows.itertuples(index=False)}


def writing_labels(probes: pd.DataFrame, thresholds: LabelThresholds, *, control: bool = False) -> list[tuple]:
    """The ``copying`` and ``suppression`` rows of the label table (:data:`LABEL_COLUMNS`) earned on the probe table,
    one per head, label and form (the probe, the corpus); ``control``: earned on the shuffled control's scores instead
    (what a test checks earns none)."""
    weights_only = _one(probes, WEIGHTS_ONLY)
    rows = []
    for label in WRITING_LABELS:
        threshold = getattr(thresholds, label.threshold)
        for form, where in (("", "probe queries"), (CORPUS_FORM, "repeating queries of the corpus")):
            raised, shuffled = _one(probes, LOGIT_RAISE + form), _one(probes, label.name + form + SHUFFLED)
            earned = probes[probes.probe == label.name + form + (SHUFFLED if control else "")]
            for row in earned.itertuples(index=False):
                key = (int(row.layer), int(row.head))
                if (row.score < threshold or row.score < thresholds.over_chance * row.chance
                        or (form and row.queries < thresholds.min_queries)):
                    continue
                detail = (f"{'top' if label.writes > 0 else 'bottom'} 5 of the candidates over {int(row.queries):,} "
                          f"{where}; attending raises a token's own logit by {raised.get(key, float('nan')):+.2f} "
                          f"on average; shuffled targets {shuffled.get(key, float('nan')):.3f}")
                if label is COPYING:
                    detail += (f"; weights-only OV copying score (TransformerLens) "
                               f"{weights_only.get(key, float('nan')):.3f}")
                values = {"layer": key[0], "head": key[1], "label": label.name, "detail": detail,
                          "score": float(row.score), "chance": float(row.chance), "threshold": float(threshold),
                          "probe": str(row.source), "queries": int(row.queries)}
                rows.append(tuple(values.get(column) for column in LABEL_COLUMNS))
    return rows
