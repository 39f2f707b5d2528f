"""Every label a head earns, each with its evidence: the atlas's label table (``run.atlas.labels``).

One row per (layer, head, label): :data:`LABEL_COLUMNS`. ``score`` is what the head measured on ``probe``,
``chance`` what a head attending uniformly would score there (:mod:`qkviz.analysis.statistics.uniform_chance`; for
the repeated-token probe the same on its sequences), ``threshold`` what earns the label
(:class:`qkviz.analysis.labels.registry.LabelThresholds`), ``detail`` what was measured. Each label's threshold, its
offset or copying target and whether it needs its chance are declared in :mod:`qkviz.analysis.labels.registry`; the
rules below read them. A head earns every label whose score reaches its threshold (and, measured on the corpus,
``over_chance`` times its chance, as short sequences make chance high; ``first-token`` keeps Gu et al.'s rule as it
is, and ``broad`` needs none, its chance being its ceiling):

* ``previous-token``, ``next-token`` (encoders), ``self``, ``fixed-offset`` (the strongest offset ``|o| >= 2``, named
  in ``detail``): the head's mean attention at that relative position over the corpus, ``>= position_mass``;
* ``local``: the mean attention within ``|o| <= LOCAL_WINDOW`` reaches ``local_mass`` while no single offset there
  reaches ``position_mass`` (attention spread over a window of neighbours);
* ``first-token``: Gu et al. 2025's first-token importance, the mean attention every query pays to the first token,
  above their threshold ``epsilon = 0.3`` (``first_token``); where the run has output norms its ``detail`` says how
  much the head moves from there (``first_token_transmits``: a sink that moves nothing from one that moves something);
* ``delimiter``: the share of queries whose strongest key is a special or punctuation token other than the first
  reaches ``argmax_share``; its chance is the share of such keys;
* ``broad``: normalised entropy ``>= broad_entropy`` (a uniform head scores 1);
* ``induction`` and ``duplicate-token``: mean attention to the token after the earlier occurrence of the query's
  token (to that occurrence) ``>= copying``, on the repeated-random-tokens probe (:mod:`qkviz.probes.head_probes`)
  and, where the corpus repeats itself (``min_queries`` queries or more), on its repeats;
* ``dependency`` (with ``--syntax``): the share of the words in one dependency relation whose strongest key is the
  related word (Clark et al. 2019; ``detail`` names the relation and direction, e.g. ``det → head``) reaches
  ``relation``, over ``min_queries`` queries or more.

A head's **strongest label** (the atlas table's ``label`` column, what colours the matrix) is its earned label with the
largest score over threshold, a sink's (``first-token``, ``delimiter``) or ``broad`` only where it earns no other,
``content`` where it earns none.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd

from qkviz.analysis.labels.registry import (BROAD, COPYING_LABELS, DELIMITER, DEPENDENCY, FIRST_TOKEN, FIXED_OFFSET,
                                           HEAD_LABEL, LOCAL, LOCAL_WINDOW, OFFSET_LABELS, RESTING_LABELS, CONTENT,
                                           LabelThresholds)

LABEL_COLUMNS = ("layer", "head", "label", "detail", "score", "chance", "threshold", "probe")
CORPUS = "corpus"
CORPUS_REPEATS = "corpus repeats"
SYNTAX_PROBE = "corpus, spaCy parse"
FIRST_TOKEN_RULE = "Gu et al. 2025 first-token importance (mean attention to the first token), epsilon 0.3"


class ChanceLevels(Protocol):
    """What a head attending uniformly scores on one layer's mask
    (:class:`qkviz.analysis.statistics.uniform_chance.UniformChance`)."""

    offsets: np.ndarray         # float64 [2 * max_offset + 1]: mean attention at each offset, -max_offset first
    first_token: float          # mean attention to the first token


def corpus_labels(row: dict, profile: np.ndarray, chance: ChanceLevels, thresholds: LabelThresholds, *, causal: bool,
                  delimiter_share: float) -> list[tuple]:
    """The labels one head earns from its corpus statistics (``row``: its atlas row) and relative-position profile."""
    max_offset = len(profile) // 2
    at = {offset: float(np.nan_to_num(profile[offset + max_offset])) for offset in range(-max_offset, max_offset + 1)}
    chance_at = {offset: float(np.nan_to_num(chance.offsets[offset + max_offset]))
                 for offset in range(-max_offset, max_offset + 1)}
    layer, head = int(row["layer"]), int(row["head"])
    rows = []

    def earn(label, detail, score, chance_score, probe=CORPUS):
        threshold = getattr(thresholds, label.threshold)
        if score >= threshold and (not label.over_chance or score >= thresholds.over_chance * chance_score):
            rows.append((layer, head, label.name, detail, float(score), float(chance_score), float(threshold), probe))

    for label in OFFSET_LABELS:
        if label.offset <= 0 or not causal:
            earn(label, f"mean attention at offset {label.offset:+d}", at[label.offset], chance_at[label.offset])
    far = [offset for offset in at if abs(offset) >= 2 and (offset < 0 or not causal)]
    if far:
        best = max(far, key=lambda offset: at[offset])
        earn(FIXED_OFFSET, f"offset {best:+d}: mean attention there", at[best], chance_at[best])
    window = [offset for offset in at if abs(offset) <= LOCAL_WINDOW and (offset <= 0 or not causal)]
    if max(at[offset] for offset in window) < thresholds.position_mass:
        earn(LOCAL, f"mean attention within offsets {min(window):+d}..{max(window):+d}",
             sum(at[offset] for offset in window), sum(chance_at[offset] for offset in window))
    earn(FIRST_TOKEN, FIRST_TOKEN_RULE + _moved(row, "first_token"), float(row["first_token_attention"]),
         chance.first_token)
    earn(DELIMITER, "share of queries whose strongest key is a special or punctuation token (not the first)",
         float(row["argmax_delimiter"]), delimiter_share)
    earn(BROAD, "normalised entropy (1: uniform)", float(row["entropy_normalised"]), 1.0)
    for label in COPYING_LABELS:
        column = label.column
        if column in row and float(row.get(f"{column}_queries", 0)) >= thresholds.min_queries:
            earn(label, f"mean attention to the {label.copy_target} over {int(row[f'{column}_queries']):,} repeating "
                        "queries", float(row[column]), float(row[f"{column}_chance"]), CORPUS_REPEATS)
    for name in row:
        if name.startswith("relation_") and not name.endswith(("_queries", "_chance")):
            if float(row.get(f"{name}_queries", 0)) >= thresholds.min_queries:
                earn(DEPENDENCY, _relation_detail(name), float(row[name]), float(row[f"{name}_chance"]), SYNTAX_PROBE)
    return rows


def _moved(row: dict, where: str) -> str:
    """What a sink moves, where the run has output norms: the value-weighted share of its attention mass
    (``<where>_transmits``, Kobayashi et al. 2020: a sink with short value vectors moves almost nothing)."""
    ratio = row.get(f"{where}_transmits")
    if ratio is None or not np.isfinite(float(ratio)):
        return ""
    return f"; it transmits {float(ratio):.2f}× its attention share there (value-weighted share / attention share)"


def _relation_detail(column: str) -> str:
    """``relation_det_dependent`` -> ``det → head`` (the dependent's strongest key is its head word);
    ``relation_dobj_head`` -> ``head → dobj``."""
    relation, side = column.removeprefix("relation_").rsplit("_", 1)
    return f"{relation} → head" if side == "dependent" else f"head → {relation}"


def probe_labels(probes: pd.DataFrame, thresholds: LabelThresholds) -> list[tuple]:
    """The copying labels (induction, duplicate-token) earned on the repeated-token probe
    (:mod:`qkviz.probes.head_probes`'s table)."""
    earned = probes[probes.probe.isin([label.name for label in COPYING_LABELS])]
    rows = []
    for row in earned.itertuples(index=False):
        label = HEAD_LABEL[str(row.probe)]
        threshold = getattr(thresholds, label.threshold)
        if row.score >= threshold:
            rows.append((int(row.layer), int(row.head), label.name,
                         f"mean attention to the {label.copy_target} over {int(row.queries):,} queries",
                         float(row.score), float(row.chance), float(threshold), str(row.source)))
    return rows


def strongest_labels(labels: pd.DataFrame, heads: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[str, str]]:
    """Per head ``(label, detail)``: its strongest label (see the module), ``("content", ...)`` where it earns none."""
    found = {head: (CONTENT.name, "no label's threshold reached") for head in heads}
    if labels.empty:
        return found
    ranked = labels.assign(resting=labels.label.isin(RESTING_LABELS), strength=labels.score / labels.threshold)
    ranked = ranked.sort_values(["layer", "head", "resting", "strength"], ascending=[True, True, True, False])
    for row in ranked.drop_duplicates(["layer", "head"]).itertuples(index=False):
        found[(int(row.layer), int(row.head))] = (str(row.label), f"{row.detail}: {row.score:.3g} "
                                                                  f"(chance {row.chance:.2g}; {row.probe})")
    return found


def as_label_table(rows: list[tuple]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=list(LABEL_COLUMNS))
    return table.sort_values(["layer", "head", "label", "detail"], kind="stable").reset_index(drop=True)
