"""Every label a head earns, each with its evidence: the atlas's label table (``run.atlas.labels``).

One row per (layer, head, label): :data:`LABEL_COLUMNS`. ``score`` is what the head measured on ``probe``,
``chance`` what a head attending uniformly would score there (:mod:`qkviz.analysis.statistics.uniform_chance`; for
the repeated-token probe the same on its sequences), ``threshold`` what earns the label
(:class:`qkviz.analysis.labels.registry.LabelThresholds`), ``detail`` what was measured, and ``queries`` how many
queries the score rests on: the head's queries for ``first-token``, ``delimiter`` and ``broad``; for an offset label
the queries whose key at that offset is not the first token (``local``: those of its best-covered offset); the
repeating queries of a corpus-repeat label; the probe's queries of a probe label; the words (their tokens) of a
relation for ``dependency``. Each label's threshold, its
offset or copying target and whether it needs its chance are declared in :mod:`qkviz.analysis.labels.registry`; the
rules below read them. A head earns every label whose score reaches its threshold (and, measured on the corpus,
``over_chance`` times its chance, as short sequences make chance high; ``first-token`` keeps Gu et al.'s rule as it
is, and ``broad`` needs none, its chance being its ceiling):

* ``previous-token``, ``next-token`` (encoders), ``self``, ``fixed-offset`` (the strongest offset ``|o| >= 2``, named
  in ``detail``): the head's mean attention at that relative position over the corpus, ``>= position_mass``,
  **measured with the first token left out and only where the offset has support**. An offset's queries are those
  whose key there is not the first token (``i + o > 0``), and the score is their mean attention there: attention to
  the first token is a sink's, whatever offset it lies at, so a first-token sink never earns an offset label under
  another name (a sink's weight at offset ``-i`` of query ``i`` counts for nothing). The offset has support when those
  queries are ``offset_support`` (10%) of the head's queries or more: an offset only the longest sequences reach
  (one query at ``-51``) is never a label, nor a candidate for ``fixed-offset``;
* ``local``: the mean attention within ``|o| <= LOCAL_WINDOW`` (the offsets there with support, first token left
  out) reaches ``local_mass`` while no single offset there reaches ``position_mass`` (attention spread over a window
  of neighbours);
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
  ``relation``, over ``min_queries`` queries or more, and beats the relation's best fixed-offset baseline (Clark et
  al.'s: the share of those words whose related word is at the single most common offset in words, named in
  ``detail``), so a previous-token head is not a ``compound → head`` head for the position alone.

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

LABEL_COLUMNS = ("layer", "head", "label", "detail", "score", "chance", "threshold", "probe", "queries")
CORPUS = "corpus"
CORPUS_REPEATS = "corpus repeats"
SYNTAX_PROBE = "corpus, spaCy parse"
FIRST_TOKEN_RULE = "Gu et al. 2025 first-token importance (mean attention to the first token), epsilon 0.3"
#: the suffixes of a relation's columns that are not its score (qkviz.analysis.statistics.syntax)
RELATION_SUFFIXES = ("_queries", "_chance", "_baseline", "_baseline_offset")


class ChanceLevels(Protocol):
    """What a head attending uniformly scores on one layer's mask
    (:class:`qkviz.analysis.statistics.uniform_chance.UniformChance`)."""

    offsets_no_first: np.ndarray    # float64 [2 * max_offset + 1]: mean attention at each offset, first token left out
    first_token: float              # mean attention to the first token


def corpus_labels(row: dict, support: np.ndarray, chance: ChanceLevels, thresholds: LabelThresholds, *, causal: bool,
                  delimiter_share: float) -> list[tuple]:
    """The labels one head earns from its corpus statistics (``row``: its atlas row) and its offset support
    (``support``: ``[3, 2 * max_offset + 1]``, :data:`qkviz.analysis.statistics.head_stats.OFFSET_SUPPORT_ROWS`: per
    offset its queries, those whose key there is not the first token, and their mean attention there)."""
    layer, head = int(row["layer"]), int(row["head"])
    queries = float(support[0, support.shape[1] // 2])     # every query may attend to itself: the head's queries
    rows = []

    def earn(label, detail, score, chance_score, rests_on, probe=CORPUS):
        threshold = getattr(thresholds, label.threshold)
        if score >= threshold and (not label.over_chance or score >= thresholds.over_chance * chance_score):
            rows.append((layer, head, label.name, detail, float(score), float(chance_score), float(threshold), probe,
                         int(rests_on)))

    _positional_labels(earn, support, chance, thresholds, causal)
    earn(FIRST_TOKEN, FIRST_TOKEN_RULE + _moved(row, "first_token"), float(row["first_token_attention"]),
         chance.first_token, queries)
    earn(DELIMITER, "share of queries whose strongest key is a special or punctuation token (not the first)",
         float(row["argmax_delimiter"]), delimiter_share, queries)
    earn(BROAD, "normalised entropy (1: uniform)", float(row["entropy_normalised"]), 1.0, queries)
    for label in COPYING_LABELS:
        column = label.column
        if column in row and float(row.get(f"{column}_queries", 0)) >= thresholds.min_queries:
            earn(label, f"mean attention to the {label.copy_target} over {int(row[f'{column}_queries']):,} repeating "
                        "queries", float(row[column]), float(row[f"{column}_chance"]), row[f"{column}_queries"],
                 CORPUS_REPEATS)
    _dependency_labels(earn, row, thresholds)
    return rows


def _positional_labels(earn, support: np.ndarray, chance: ChanceLevels, thresholds: LabelThresholds,
                       causal: bool) -> None:
    """The offset labels and ``local`` (see the module): measured with the first token left out, over the offsets
    whose queries (those with a key there other than the first token) are ``offset_support`` of the head's or more."""
    max_offset = support.shape[1] // 2
    total = float(support[0, max_offset])
    seen = [offset for offset in range(-max_offset, max_offset + 1) if offset <= 0 or not causal]
    rests_on = {offset: float(support[1, offset + max_offset]) for offset in seen}
    held = [offset for offset in seen if total > 0 and rests_on[offset] >= thresholds.offset_support * total]
    at = {offset: float(np.nan_to_num(support[2, offset + max_offset])) for offset in held}
    chance_at = {offset: float(np.nan_to_num(chance.offsets_no_first[offset + max_offset])) for offset in held}

    def evidence(offset: int) -> str:
        return f"first token left out, over {int(rests_on[offset]):,} queries ({rests_on[offset] / total:.0%})"

    for label in OFFSET_LABELS:
        if label.offset in at:
            earn(label, f"mean attention at offset {label.offset:+d}, {evidence(label.offset)}", at[label.offset],
                 chance_at[label.offset], rests_on[label.offset])
    far = [offset for offset in held if abs(offset) >= 2]
    if far:
        best = max(far, key=lambda offset: at[offset])
        earn(FIXED_OFFSET, f"offset {best:+d}: mean attention there, {evidence(best)}", at[best], chance_at[best],
             rests_on[best])
    window = [offset for offset in held if abs(offset) <= LOCAL_WINDOW]
    if window and max(at[offset] for offset in window) < thresholds.position_mass:
        earn(LOCAL, f"mean attention within offsets {min(window):+d}..{max(window):+d}, first token left out",
             sum(at[offset] for offset in window), sum(chance_at[offset] for offset in window),
             max(rests_on[offset] for offset in window))


def _dependency_labels(earn, row: dict, thresholds: LabelThresholds) -> None:
    """``dependency``, per relation and side over ``min_queries`` queries or more, whose score also beats the
    relation's best fixed-offset baseline (:mod:`qkviz.analysis.statistics.syntax`), named in its detail."""
    for name in row:
        if not name.startswith("relation_") or name.endswith(RELATION_SUFFIXES):
            continue
        queries = float(row.get(f"{name}_queries", 0))
        baseline = float(row.get(f"{name}_baseline", np.nan))
        if queries < thresholds.min_queries or not float(row[name]) > baseline:     # a NaN baseline: not earned
            continue
        offset = float(row.get(f"{name}_baseline_offset", np.nan))
        where = f" at word offset {int(offset):+d}" if np.isfinite(offset) else ""
        earn(DEPENDENCY, f"{_relation_detail(name)}; best fixed-offset baseline {baseline:.2f}{where}",
             float(row[name]), float(row[f"{name}_chance"]), queries, SYNTAX_PROBE)


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
                         float(row.score), float(row.chance), float(threshold), str(row.source), int(row.queries)))
    return rows


def strongest_labels(labels: pd.DataFrame, heads: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[str, str]]:
    """Per head ``(label, detail)``: its strongest label (see the module), ``("content", ...)`` where it earns none."""
    found = {head: (CONTENT.name, "no label's threshold reached") for head in heads}
    if labels.empty:
        return found
    ranked = labels.assign(resting=labels.label.isin(RESTING_LABELS), strength=labels.score / labels.threshold)
    ranked = ranked.sort_values(["layer", "head", "resting", "strength"], ascending=[True, True, True, False])
    for row in ranked.drop_duplicates(["layer", "head"]).itertuples(index=False):
        found[(int(row.layer), int(row.head))] = (str(row.label), f"{row.detail}: {row.score:.3g} (chance "
                                                                  f"{row.chance:.2g}; {row.probe}; "
                                                                  f"{int(row.queries):,} queries)")
    return found


def as_label_table(rows: list[tuple]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=list(LABEL_COLUMNS))
    return table.sort_values(["layer", "head", "label", "detail"], kind="stable").reset_index(drop=True)
