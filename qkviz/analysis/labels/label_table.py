"""Every label a head earns, each with its evidence: the atlas's label table (``run.atlas.labels``).

One row per (layer, head, label): :data:`LABEL_COLUMNS`. ``score`` is what the head measured on ``probe``, ``chance``
what a head attending uniformly would score there (:mod:`qkviz.analysis.statistics.uniform_chance`; for the repeated-token probe
the same on its sequences), ``threshold`` what earns the label (:class:`qkviz.analysis.labels.head_labels.LabelThresholds`),
``detail`` what was measured. A head earns every label whose score reaches its threshold (and, measured on the
corpus, ``over_chance`` times its chance, as short sequences make chance high; ``first-token`` keeps Gu et al.'s
rule as it is, and ``broad`` needs none, its chance being its ceiling):

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

import numpy as np
import pandas as pd

from qkviz.analysis.labels.head_labels import LabelThresholds
from qkviz.analysis.statistics.uniform_chance import UniformChance

LABEL_COLUMNS = ("layer", "head", "label", "detail", "score", "chance", "threshold", "probe")
#: labels that say where attention rests rather than what it does: a head's strongest label only without another
RESTING_LABELS = ("first-token", "delimiter", "broad")
#: the offsets (either side) of the ``local`` label
LOCAL_WINDOW = 3
CORPUS = "corpus"
CORPUS_REPEATS = "corpus repeats"
SYNTAX_PROBE = "corpus, spaCy parse"
FIRST_TOKEN_RULE = "Gu et al. 2025 first-token importance (mean attention to the first token), epsilon 0.3"


def corpus_labels(row: dict, profile: np.ndarray, chance: UniformChance, thresholds: LabelThresholds, *, causal: bool,
                  delimiter_share: float) -> list[tuple]:
    """The labels one head earns from its corpus statistics (``row``: its atlas row) and relative-position profile."""
    max_offset = len(profile) // 2
    at = {offset: float(np.nan_to_num(profile[offset + max_offset])) for offset in range(-max_offset, max_offset + 1)}
    chance_at = {offset: float(np.nan_to_num(chance.offsets[offset + max_offset]))
                 for offset in range(-max_offset, max_offset + 1)}
    layer, head = int(row["layer"]), int(row["head"])
    rows = []

    def earn(label, detail, score, chance_score, threshold, probe=CORPUS, over_chance=True):
        if score >= threshold and (not over_chance or score >= thresholds.over_chance * chance_score):
            rows.append((layer, head, label, detail, float(score), float(chance_score), float(threshold), probe))

    named = [("previous-token", -1), ("self", 0)] + ([] if causal else [("next-token", 1)])
    for label, offset in named:
        earn(label, f"mean attention at offset {offset:+d}", at[offset], chance_at[offset], thresholds.position_mass)
    far = [offset for offset in at if abs(offset) >= 2 and (offset < 0 or not causal)]
    if far:
        best = max(far, key=lambda offset: at[offset])
        earn("fixed-offset", f"offset {best:+d}: mean attention there", at[best], chance_at[best],
             thresholds.position_mass)
    window = [offset for offset in at if abs(offset) <= LOCAL_WINDOW and (offset <= 0 or not causal)]
    if max(at[offset] for offset in window) < thresholds.position_mass:
        earn("local", f"mean attention within offsets {min(window):+d}..{max(window):+d}",
             sum(at[offset] for offset in window), sum(chance_at[offset] for offset in window), thresholds.local_mass)
    earn("first-token", FIRST_TOKEN_RULE + _moved(row, "first_token"), float(row["first_token_attention"]),
         chance.first_token, thresholds.first_token, over_chance=False)
    earn("delimiter", "share of queries whose strongest key is a special or punctuation token (not the first)",
         float(row["argmax_delimiter"]), delimiter_share, thresholds.argmax_share)
    if float(row["entropy_normalised"]) >= thresholds.broad_entropy:
        rows.append((layer, head, "broad", "normalised entropy (1: uniform)", float(row["entropy_normalised"]), 1.0,
                     float(thresholds.broad_entropy), CORPUS))
    for label in ("induction", "duplicate-token"):
        column = f"corpus_{label.replace('-', '_')}"
        if column in row and float(row.get(f"{column}_queries", 0)) >= thresholds.min_queries:
            earn(label, f"mean attention to the {_copy_target(label)} over "
                        f"{int(row[f'{column}_queries']):,} repeating queries",
                 float(row[column]), float(row[f"{column}_chance"]), thresholds.copying, CORPUS_REPEATS)
    for name in row:
        if name.startswith("relation_") and not name.endswith(("_queries", "_chance")):
            if float(row.get(f"{name}_queries", 0)) >= thresholds.min_queries:
                earn("dependency", _relation_detail(name), float(row[name]), float(row[f"{name}_chance"]),
                     thresholds.relation, SYNTAX_PROBE)
    return rows


def _moved(row: dict, where: str) -> str:
    """What a sink moves, where the run has output norms: the value-weighted share of its attention mass
    (``<where>_transmits``, Kobayashi et al. 2020: a sink with short value vectors moves almost nothing)."""
    ratio = row.get(f"{where}_transmits")
    if ratio is None or not np.isfinite(float(ratio)):
        return ""
    return f"; it transmits {float(ratio):.2f}× its attention share there (value-weighted share / attention share)"


def _copy_target(label: str) -> str:
    return "token after the earlier occurrence" if label == "induction" else "earlier occurrence of its token"


def _relation_detail(column: str) -> str:
    """``relation_det_dependent`` -> ``det → head`` (the dependent's strongest key is its head word);
    ``relation_dobj_head`` -> ``head → dobj``."""
    relation, side = column.removeprefix("relation_").rsplit("_", 1)
    return f"{relation} → head" if side == "dependent" else f"head → {relation}"


def probe_labels(probes: pd.DataFrame, thresholds: LabelThresholds) -> list[tuple]:
    """The induction and duplicate-token labels earned on the repeated-token probe (:mod:`qkviz.probes.head_probes`'s
    table)."""
    earned = probes[probes.probe.isin(("induction", "duplicate-token")) & (probes.score >= thresholds.copying)]
    return [(int(row.layer), int(row.head), str(row.probe),
             f"mean attention to the {_copy_target(str(row.probe))} over {int(row.queries):,} queries",
             float(row.score), float(row.chance), float(thresholds.copying), str(row.source))
            for row in earned.itertuples(index=False)]


def strongest_labels(labels: pd.DataFrame, heads: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[str, str]]:
    """Per head ``(label, detail)``: its strongest label (see the module), ``("content", ...)`` where it earns none."""
    found = {head: ("content", "no label's threshold reached") for head in heads}
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
