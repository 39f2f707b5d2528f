"""The correlation report's contents (:class:`Report`): every head's distance-dot-product correlation, summarised.

:func:`build_report` computes it; :func:`qkviz.report.report_directory.write_report` writes it. A report
directory holds ``correlation.csv`` (one row per layer, head and space; see
:mod:`qkviz.analysis.statistics.correlation`), ``summary.json`` (model and per-layer means, the best projection,
how pairs were chosen, the sha256 of every other file) and ``index.html`` (with plotly.js once in ``assets/``
beside the pages: no network).
It is written into a temporary sibling directory and renamed into place, so a directory named
like the report is always a complete one. The table is also kept in the run directory, where
``qkviz serve`` shows each head's figures.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from qkviz.analysis.statistics import correlation
from qkviz.analysis.atlas.head_atlas import HeadAtlas, load_atlas
from qkviz.analysis.statistics.head_stats import STATISTICS
from qkviz.core.errors import QkvizError
from qkviz.neighbours.trust import RECALL_GOAL, TRUST_GOAL, meets_goals
from qkviz.store.run import StoredRun, as_run

logger = logging.getLogger(__name__)

REPORT_SCHEMA_VERSION = 1
CSV_NAME = "correlation.csv"
SUMMARY_NAME = "summary.json"
HTML_NAME = "index.html"
ATLAS_HTML_NAME = "atlas.html"
#: AttentionViz (Yeh et al., 2023), Wiki-Auto data: mean correlation between query-key distance
#: and dot product over heads.
ATTENTIONVIZ_MEANS = {"BERT": -0.938, "GPT-2": -0.792}
FIGURES = ("pearson", "spearman", "query_spearman", "recall_query", "recall_key", "trust")
SCATTER_PAIRS = 3000


@dataclass
class Report:
    """The correlation report of a run; :func:`qkviz.report.write_report` writes it as files.

    ``table`` has one row per (layer, head, space) (columns in ``qkviz.analysis.statistics.correlation.COLUMNS``);
    ``summary`` the model and per-layer means, the best projection and how pairs were chosen."""

    table: pd.DataFrame
    summary: dict
    extremes: dict[str, correlation.HeadPairs]   # "best" / "worst" head by translated+scaled Pearson
    atlas: HeadAtlas | None = None               # the run's head statistics, when 'qkviz stats' made them


def correlation_report(run: StoredRun | str | Path, *, max_pairs: int | None = None,
                       seed: int = 0, progress: bool = True) -> Report:
    """How faithfully each head's joint query/key picture shows its attention: the distance-dot-product
    correlation of every head in every space, also kept in the run for the app (what ``qkviz report`` computes).

    Spaces: original, translated, translated+scaled, and every cached projection. Pairs are every
    pair the model's mask lets attend, exactly up to ``max_pairs`` per layer, a seeded uniform sample past it.

    Parameters
    ----------
    run
        A run, or the path of one.
    max_pairs
        Exact up to this many attending pairs per layer; None: 5,000,000, or fewer past 30 heads so that all the
        heads' pairs stay within 150 million (:func:`qkviz.analysis.statistics.correlation.default_max_pairs`).
    seed
        Seed of the pair sample.
    progress
        Show a progress bar.

    Returns
    -------
    Report
        Write it with :func:`qkviz.write_report`.
    """
    run = as_run(run)
    max_pairs = correlation.default_max_pairs(run) if max_pairs is None else max_pairs
    if max_pairs < 10:
        raise QkvizError(f"max_pairs must be at least 10, got {max_pairs}")
    report = build_report(run, max_pairs=max_pairs, seed=seed, progress=progress)
    correlation.store_correlations(run, report.table)
    summary, means = report.summary, report.summary["model_means"]
    best = (f"; best projection {summary['projections'][0]['space']} {summary['projections'][0]['pearson']:+.3f}"
            if summary["projections"] else "")
    logger.info("%s: %d heads in %.1f s; mean Pearson original %+.3f, translated+scaled %+.3f%s", run.path,
                run.n_layers * run.n_heads, summary["seconds"], means["original"]["pearson"],
                means["translated+scaled"]["pearson"], best)
    if "missing_projections" in summary:
        logger.warning("no projections are cached, so the report covers the head spaces only; "
                       "add them with '%s' and make the report again", summary["missing_projections"])
    return report


def build_report(run: StoredRun, max_pairs: int = correlation.DEFAULT_MAX_PAIRS, seed: int = 0,
                 progress: bool = False) -> Report:
    """Compute the table, the summary and the sampled pairs of the best and worst heads."""
    started = time.perf_counter()
    projections = correlation.cached_projections(run)
    table = correlation.correlation_table(run, max_pairs=max_pairs, seed=seed, progress=progress,
                                          projections=projections)
    summary = summarise(run, table, max_pairs, seed)
    extremes, summary["extreme_pairs"] = _extreme_heads(run, table, max_pairs, seed, projections)
    atlas = load_atlas(run)
    if atlas is None:
        summary["missing_atlas"] = f"qkviz stats --run {run.path}"
    else:
        summary["head_atlas"] = atlas_summary(atlas)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    return Report(table=table, summary=summary, extremes=extremes, atlas=atlas)


def atlas_summary(atlas: HeadAtlas) -> dict:
    """Strongest-label counts, the heads earning each label, and the model means of every statistic (the page is
    ``atlas.html``)."""
    earned = atlas.labels.drop_duplicates(["layer", "head", "label"]).label.value_counts()
    return {"page": ATLAS_HTML_NAME, "labels": {k: int(v) for k, v in atlas.table.label.value_counts().items()},
            "heads_earning": {k: int(v) for k, v in earned.items()}, "probe": atlas.probe_note,
            "writes": atlas.writes_note,
            "means": {name: _float(atlas.table[name].mean()) for name in STATISTICS},
            "thresholds": atlas.thresholds.as_dict()}


def summarise(run: StoredRun, table: pd.DataFrame, max_pairs: int, seed: int) -> dict:
    """Model-level and per-layer means per space, the best projection, and how pairs were chosen."""
    spaces = list(dict.fromkeys(table.space))
    table = with_figures(table)
    means = table.groupby("space", sort=False)[list(FIGURES)].mean()
    per_layer = table.groupby(["space", "layer"], sort=False)[list(FIGURES)].mean()
    n_pairs = int(table.n_pairs.max()) if len(table) else 0
    exact = bool(table.exact.all()) if len(table) else True
    projected = [space for space in spaces if space not in correlation.HEAD_SPACES]
    summary = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "run": str(run.path), "run_fingerprint": run.manifest["fingerprint"],
        "model": run.model_id, "family": run.family, "causal": run.is_causal,
        "n_layers": run.n_layers, "n_heads": run.n_heads, "n_tokens": run.n_tokens,
        "n_sentences": run.n_sentences,
        "dot_product": "q . k of the head (the attention logit before its positive scale); in the translated "
                       "spaces and projections, q . (k + t), which differs by a per-query constant",
        "pairs": {
            "rule": "query-key pairs of the same sentence that the model lets attend (causal mask, sliding window)",
            "exact": exact, "used_per_head": n_pairs, "max_pairs": max_pairs, "seed": seed,
            "sampling": None if exact else (
                f"{n_pairs:,} of the attending pairs of each layer drawn uniformly with replacement; with 95% "
                f"confidence each Pearson and Spearman figure is within its row's ci95 of its all-pairs value "
                f"(at most {table.ci95.max():.4f})"),
        },
        "spaces": spaces,
        "model_means": {space: _floats(means.loc[space]) for space in spaces},
        "layer_means": {space: {int(layer): _floats(row) for (row_space, layer), row in per_layer.iterrows()
                                if row_space == space} for space in spaces},
        "attentionviz_means": ATTENTIONVIZ_MEANS,
        "projections": projection_ranking(means, projected),
        "goals": goal_counts(table, projected),
    }
    if not projected:
        summary["missing_projections"] = f"qkviz project --run {run.path}"
    return summary


def with_figures(table: pd.DataFrame) -> pd.DataFrame:
    """The table with every column of :data:`FIGURES`, those it lacks (a table stored before them) unknown (NaN)."""
    missing = [name for name in FIGURES if name not in table.columns]
    return table.assign(**{name: np.nan for name in missing}) if missing else table


def goal_counts(table: pd.DataFrame, projected: list[str]) -> dict:
    """For each projection space, how many heads' layouts reach both goals (:mod:`qkviz.neighbours.trust`: partner
    recall@10, the mean of both sides, at least ``RECALL_GOAL`` and trustworthiness at least ``TRUST_GOAL``), of how
    many heads; a head whose figures are unknown reaches neither."""
    table = with_figures(table)
    spaces = {}
    for space in projected:
        rows = table[table.space == space]
        recall = (rows.recall_query + rows.recall_key) / 2
        spaces[space] = {"both": int(sum(meets_goals(r, t) for r, t in zip(recall, rows.trust))), "heads": len(rows)}
    return {"recall_goal": RECALL_GOAL, "trust_goal": TRUST_GOAL, "spaces": spaces}


def goal_lines(summary: dict) -> list[str]:
    """``N of M heads reach both goals in <space>``, one per projection space of the report (none for a summary
    made before the goals were counted)."""
    goals = summary.get("goals")
    if not goals:
        return []
    return [f"{counts['both']} of {counts['heads']} heads reach both goals in {space}"
            for space, counts in goals["spaces"].items()]


def projection_ranking(means: pd.DataFrame, projected: list[str]) -> list[dict]:
    """Projections from the one that keeps attention structure best (most negative mean Pearson).

    ``kept`` is its mean Pearson over that of the translated+scaled space it was made from."""
    reference = means.loc["translated+scaled", "pearson"] if "translated+scaled" in means.index else None
    reference = reference if reference is not None and np.isfinite(reference) and reference != 0 else None
    ranking = [{"space": space, **_floats(means.loc[space]),
                "kept": _float(means.loc[space, "pearson"] / reference) if reference else None}
               for space in projected]
    return sorted(ranking, key=lambda row: (np.inf if row["pearson"] is None else row["pearson"]))


def _extreme_heads(run: StoredRun, table: pd.DataFrame, max_pairs: int, seed: int,
                   projections: dict[tuple[int, int], dict]) -> tuple[dict[str, correlation.HeadPairs], dict]:
    """The per-pair figures (a sample of :data:`SCATTER_PAIRS`) of the best and the worst head, and per head
    how many pairs they show out of how many attend (``{"best": {"layer", "head", "shown", "attending"}}``)."""
    scored = table[table.space == "translated+scaled"].dropna(subset=["pearson"])
    if scored.empty:
        return {}, {}
    chosen = {"best": scored.loc[scored.pearson.idxmin()], "worst": scored.loc[scored.pearson.idxmax()]}
    extremes, counts = {}, {}
    for name, row in chosen.items():
        layer, head = int(row["layer"]), int(row["head"])
        pairs = correlation.attending_pairs(run, layer, min(max_pairs, SCATTER_PAIRS), seed)
        _, kept = correlation.head_correlation_rows(run, layer, head, pairs, projections.get((layer, head)),
                                                    keep_pairs=True)
        extremes[name] = kept
        counts[name] = {"layer": layer, "head": head, "shown": len(pairs.query_index), "attending": pairs.n_all}
    return extremes, counts


def _float(value) -> float | None:
    return None if value is None or not np.isfinite(value) else round(float(value), 6)


def _floats(row: pd.Series) -> dict:
    return {name: _float(row[name]) for name in FIGURES}
