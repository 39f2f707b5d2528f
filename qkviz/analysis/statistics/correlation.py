"""How faithfully a head's joint query/key picture shows its attention (numpy + scipy).

For every query-key pair that can attend to each other (same sentence; causal mask and sliding
window where the model has them) this module correlates the **distance** between the query and
the key with their **dot product** ``q . k`` -- the model's own attention logit before the
positive scale, so the same quantity in every space. A strongly negative correlation means "near
is attended to", which is what the joint embedding claims to show.

Spaces, per head:

* ``original``: the stored vectors;
* ``translated``: keys moved to the query centroid (:mod:`qkviz.core.alignment`);
* ``translated+scaled``: translated, then query and key norms scaled to match (what is projected);
* ``<method>-<dim>d`` (e.g. ``tsne-2d``): each cached projection of the head.

Beside the correlations, each row has the space's **partner recall@10** (:mod:`qkviz.neighbours.partner_recall`):
of a query's 10 strongest keys over the whole corpus, the share among its 10 nearest keys in that
space (``recall_query``), and the same from the keys' side (``recall_key``), over 200 sampled
queries and keys. Correlation says whether near pairs attend more on average; recall says whether
the picture shows each token's actual partners. Projection rows also have the layout's **trustworthiness** at
k = 10 (``trust``, :mod:`qkviz.neighbours.trust`) against the translated+scaled points it lays out, on a seeded
sample of 1,000 of the head's queries and keys: whether the layout's near points are near in the space it was
made from. The head spaces' ``trust`` is NaN: they are not layouts (translated+scaled is the reference itself,
trustworthy by definition). A table stored before the column existed reads without it (unknown).

Distances are vectorised: ``|q - k|^2 = |q|^2 + |k|^2 - 2 q.k``, and translation and scaling only
change the per-token terms (``|c q - (k + t) / c|^2 = c^2 |q|^2 + |k + t|^2 / c^2 - 2 (q.k + q.t)``),
so one dot product per pair serves the three head-space spaces.

Up to ``max_pairs`` attending pairs per layer (default 5,000,000: every pair of 10,000 tokens in
sentences of up to 500 tokens; past 30 heads fewer, :func:`default_max_pairs`, so that a report of a thousand
heads takes minutes) the figures are exact. Past that, ``max_pairs`` pairs are drawn
uniformly at random with replacement (seeded), and each row's ``ci95`` is the half-width of the
95% interval of its Pearson and Spearman coefficients (the larger of the two, from
:func:`~qkviz.analysis.statistics.rank_correlation.sampling_error_bound`); exact rows have ``ci95`` 0.
``query_spearman`` (Spearman among each query's own keys, averaged over queries) carries no bound: it is an average over queries, each
with only its sampled keys.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from qkviz.store import files as run_files
from qkviz.core.alignment import Alignment, align_head, norm_scale
from qkviz.core.attention import allowed_keys
from qkviz.core.logit_rule import LogitRule
from qkviz.neighbours.partner_recall import layout_recall, partner_sample
from qkviz.neighbours.trust import TRUST_K, TRUST_SAMPLE, reference_trust, trust_reference
from qkviz.store.projections import ProjectionCache, ProjectionSpec
from qkviz.store.run import StoredRun
from qkviz.analysis.statistics.rank_correlation import (QueryGroups, RankedValues, correlations, mean_query_spearman,
                                              rank_values, sampling_error_bound)

logger = logging.getLogger(__name__)

HEAD_SPACES = ("original", "translated", "translated+scaled")
DEFAULT_MAX_PAIRS = 5_000_000
#: heads x pairs a report computes by default: past 30 heads each head gets fewer pairs than DEFAULT_MAX_PAIRS (a
#: 1,024-head model 146,484 a layer: 21 s a head at 5,000,000 pairs would have been six hours)
RUN_PAIR_BUDGET = 150_000_000
COLUMNS = ("layer", "head", "space", "n_pairs", "pearson", "spearman", "query_spearman", "exact", "ci95",
           "recall_query", "recall_key", "trust")
#: Partner recall@RECALL_K (qkviz.neighbours.partner_recall) is measured on this many sampled queries and as many keys.
RECALL_K, RECALL_SAMPLE = 10, 200
_CHUNK = 1 << 20                       # pairs per gather, bounding memory to ~0.5 GB at d_head 64


@dataclass(frozen=True)
class PairSet:
    """Attending query-key pairs as global token indices (``queries`` and ``keys`` of a run)."""

    query_index: np.ndarray   # int64 [n_pairs]
    key_index: np.ndarray     # int64 [n_pairs]
    n_all: int                # attending pairs in the run; > n_pairs when sampled

    @property
    def exact(self) -> bool:
        return len(self.query_index) == self.n_all


def key_ranges(sentence: np.ndarray, position: np.ndarray, sentence_first: np.ndarray,
               sentence_length: np.ndarray, rule: LogitRule) -> tuple[np.ndarray, np.ndarray]:
    """Per token (as a query), the global key indices ``[lo, hi)`` it can attend to.

    ``sentence`` and ``position`` are per token; ``sentence_first`` and ``sentence_length`` per
    sentence. The rule is :func:`qkviz.core.attention.allowed_keys` (that of
    :func:`~qkviz.core.attention.allowed_pairs`) of ``rule``'s mask: keys of the same sentence, not after the
    query when causal, closer than the window and within the chunk where there are."""
    first = sentence_first[sentence]
    lo, hi = allowed_keys(position, sentence_length[sentence], rule)
    return first + lo, first + hi


def default_max_pairs(run: StoredRun) -> int:
    """Pairs per layer when none are asked for: :data:`DEFAULT_MAX_PAIRS`, or fewer so that every head's pairs
    together stay within :data:`RUN_PAIR_BUDGET` (at least 10,000 a layer)."""
    return int(min(DEFAULT_MAX_PAIRS, max(10_000, RUN_PAIR_BUDGET // (run.n_layers * run.n_heads))))


def attending_pairs(run: StoredRun, layer: int, max_pairs: int = DEFAULT_MAX_PAIRS, seed: int = 0) -> PairSet:
    """Every attending pair of ``layer`` when there are at most ``max_pairs``, else a uniform sample."""
    tokens, sentences = run.tokens, run.sentences
    lo, hi = key_ranges(tokens.sentence.to_numpy(np.int64), tokens.position.to_numpy(np.int64),
                        sentences.first_token.to_numpy(np.int64), sentences.n_tokens.to_numpy(np.int64),
                        run.logit_rule(layer, 0))         # the mask is the layer's, the same for every head
    counts = hi - lo
    ends = np.cumsum(counts)
    n_all = int(ends[-1]) if len(ends) else 0
    if n_all <= max_pairs:
        pair = np.arange(n_all, dtype=np.int64)
    else:
        pair = np.sort(np.random.default_rng(seed).integers(0, n_all, size=max_pairs))
    query = np.searchsorted(ends, pair, side="right")
    starts = ends - counts
    key = lo[query] + (pair - starts[query])
    return PairSet(query_index=query, key_index=key, n_all=n_all)


def pair_dots(queries: np.ndarray, keys: np.ndarray, pairs: PairSet) -> np.ndarray:
    """``q . k`` (float64) of every pair, gathered in chunks."""
    dots = np.empty(len(pairs.query_index))
    for start in range(0, len(dots), _CHUNK):
        stop = start + _CHUNK
        q = queries[pairs.query_index[start:stop]]
        k = keys[pairs.key_index[start:stop]]
        dots[start:stop] = np.einsum("ij,ij->i", q, k, dtype=np.float64)
    return dots


def pair_distances(points_a: np.ndarray, points_b: np.ndarray, pairs: PairSet) -> np.ndarray:
    """Euclidean distance between ``points_a[query]`` and ``points_b[key]`` of every pair."""
    out = np.empty(len(pairs.query_index))
    for start in range(0, len(out), _CHUNK):
        stop = start + _CHUNK
        difference = (points_a[pairs.query_index[start:stop]].astype(np.float64)
                      - points_b[pairs.key_index[start:stop]])
        out[start:stop] = np.sqrt(np.einsum("ij,ij->i", difference, difference))
    return out


def head_space_figures(queries: np.ndarray, keys: np.ndarray, pairs: PairSet, dots: np.ndarray
                       ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{space: (distances, dot products)}`` of every pair in the three head spaces.

    The translated spaces' dot product is ``q . (k + t)``: the logit plus a per-query constant,
    which the softmax ignores (norm scaling changes no dot product)."""
    queries = np.asarray(queries, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    q_index, k_index = pairs.query_index, pairs.key_index
    query_sq = np.einsum("ij,ij->i", queries, queries)
    key_sq = np.einsum("ij,ij->i", keys, keys)
    figures = {"original": (_sqrt_clipped(query_sq[q_index] + key_sq[k_index] - 2 * dots), dots)}

    translation = queries.mean(axis=0) - keys.mean(axis=0)
    moved = keys + translation
    moved_sq = np.einsum("ij,ij->i", moved, moved)
    moved_dots = dots + (queries @ translation)[q_index]
    figures["translated"] = (_sqrt_clipped(query_sq[q_index] + moved_sq[k_index] - 2 * moved_dots), moved_dots)
    scale = norm_scale(queries, moved)
    figures["translated+scaled"] = (_sqrt_clipped(
        scale ** 2 * query_sq[q_index] + moved_sq[k_index] / scale ** 2 - 2 * moved_dots), moved_dots)
    return figures


def head_space_clouds(queries: np.ndarray, keys: np.ndarray) -> dict[str, np.ndarray]:
    """``{space: [2n, d_head] points}`` of the three head spaces, queries first (for partner recall)."""
    aligned = align_head(queries, keys, Alignment(translate_keys=True, scale_norms=True))
    return {"original": np.vstack([queries, keys]),
            "translated": np.vstack([queries, keys + aligned.key_translation]),
            "translated+scaled": aligned.points}


def _sqrt_clipped(squared: np.ndarray) -> np.ndarray:
    return np.sqrt(np.maximum(squared, 0.0))


def cached_projections(run: StoredRun) -> dict[tuple[int, int], dict[str, ProjectionSpec]]:
    """``{(layer, head): {space name: spec}}`` of the cached projections made with the default alignment.

    A method and dimension cached with several settings gets one space per setting, named with
    the settings that differ (``tsne-2d perplexity=50``)."""
    by_head: dict[tuple[int, int], list[ProjectionSpec]] = {}
    for spec in ProjectionCache(run.path, run.manifest["fingerprint"]).specs():
        if spec.translate_keys and spec.scale_norms:
            by_head.setdefault((spec.layer, spec.head), []).append(spec)
    return {head: {projection_space_name(spec, found): spec for spec in sorted(found, key=_spec_order)}
            for head, found in by_head.items()}


def projection_space_name(spec: ProjectionSpec, siblings: list[ProjectionSpec]) -> str:
    """``<method>-<dim>d``, plus the parameters that tell it from its siblings of that method/dim."""
    name = f"{spec.method}-{spec.dim}d"
    same = [other for other in siblings if (other.method, other.dim) == (spec.method, spec.dim)]
    if len(same) <= 1:
        return name
    differing = sorted({key for other in same for key, value in other.params
                        if dict(spec.params).get(key) != value})
    return name + " " + " ".join(f"{key}={dict(spec.params).get(key)}" for key in differing)


def _spec_order(spec: ProjectionSpec) -> tuple:
    return spec.method, spec.dim, str(spec.params)


@dataclass
class HeadPairs:
    """One head's per-pair figures, kept for plotting: ``{space: (distances, dot products)}``."""

    layer: int
    head: int
    figures: dict[str, tuple[np.ndarray, np.ndarray]]


def head_correlation_rows(run: StoredRun, layer: int, head: int, pairs: PairSet,
                          projections: dict[str, ProjectionSpec] | None = None, keep_pairs: bool = False
                          ) -> tuple[list[dict], HeadPairs | None]:
    """The table rows of one head (every space), and optionally its per-pair figures.

    ``projections`` are the head's entries of :func:`cached_projections`. A projection's dot
    product is that of the space it was made from (translated and scaled)."""
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    figures = head_space_figures(queries, keys, pairs, pair_dots(queries, keys, pairs))
    projected_dots = figures["translated+scaled"][1]
    recall_sample = partner_sample(queries, keys, run.logit_rule(layer, head), RECALL_K, RECALL_SAMPLE)
    clouds = head_space_clouds(queries, keys)
    recalls = {space: layout_recall(recall_sample, cloud) for space, cloud in clouds.items()}
    trust: dict[str, float] = {}
    reference = None                    # the translated+scaled points' sample, made for the first projection
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    for space, spec in (projections or {}).items():
        coordinates = cache.load(spec)
        if coordinates is not None:
            distances = pair_distances(coordinates[:run.n_tokens], coordinates[run.n_tokens:], pairs)
            figures[space] = (distances, projected_dots)
            recalls[space] = layout_recall(recall_sample, coordinates)
            if reference is None:
                reference = trust_reference(clouds["translated+scaled"], TRUST_K, TRUST_SAMPLE)
            trust[space] = reference_trust(reference, coordinates)
    groups = QueryGroups.of(pairs.query_index)
    ranked: dict[int, RankedValues] = {}   # the dot products are shared by most spaces: rank them once

    def ranked_once(values: np.ndarray) -> RankedValues:
        if id(values) not in ranked:
            ranked[id(values)] = rank_values(values, groups)
        return ranked[id(values)]

    rows = []
    for space, (distances, dots) in figures.items():
        ranked_distances, ranked_dots = rank_values(distances, groups), ranked_once(dots)
        pearson, spearman = correlations(ranked_distances, ranked_dots)
        ci95 = 0.0 if pairs.exact else max(sampling_error_bound(distances, dots),
                                           sampling_error_bound(ranked_distances.ranks, ranked_dots.ranks))
        rows.append({"layer": layer, "head": head, "space": space, "n_pairs": len(dots), "pearson": pearson,
                     "spearman": spearman, "query_spearman": mean_query_spearman(ranked_distances, ranked_dots, groups),
                     "exact": pairs.exact, "ci95": ci95, "recall_query": recalls[space]["query"],
                     "recall_key": recalls[space]["key"], "trust": trust.get(space, np.nan)})
    return rows, (HeadPairs(layer, head, figures) if keep_pairs else None)


def correlation_table(run: StoredRun, max_pairs: int = DEFAULT_MAX_PAIRS, seed: int = 0, progress: bool = False,
                      layers: list[int] | None = None, heads: list[int] | None = None,
                      projections: dict[tuple[int, int], dict[str, ProjectionSpec]] | None = None) -> pd.DataFrame:
    """Every chosen head's distance-dot-product correlations, without writing anything.

    Parameters
    ----------
    run
        The run.
    max_pairs
        Exact up to this many attending pairs per layer, a seeded uniform sample past it.
    seed
        Seed of the pair sample.
    progress
        Show a progress bar.
    layers, heads
        The heads (default: all).
    projections
        :func:`cached_projections` of the run, when the caller has read it already.

    Returns
    -------
    pandas.DataFrame
        One row per (layer, head, space), columns ``COLUMNS``; see the module docstring for the spaces.
    """
    from tqdm.auto import tqdm

    layers = list(range(run.n_layers)) if layers is None else layers
    heads = list(range(run.n_heads)) if heads is None else heads
    rows: list[dict] = []
    pair_sets: dict[tuple[int | None, int | None], PairSet] = {}      # (window, chunk) -> pairs
    projections = cached_projections(run) if projections is None else projections
    with tqdm(total=len(layers) * len(heads), unit="head", desc="correlating", disable=not progress,
              dynamic_ncols=True) as bar:
        for layer in layers:
            mask = (run.sliding_window(layer), run.chunk(layer))
            if mask not in pair_sets:
                pair_sets[mask] = attending_pairs(run, layer, max_pairs, seed)
            for head in heads:
                rows.extend(head_correlation_rows(run, layer, head, pair_sets[mask],
                                                  projections.get((layer, head)))[0])
                bar.update()
    return pd.DataFrame(rows, columns=list(COLUMNS))


def store_correlations(run: StoredRun, table: pd.DataFrame) -> None:
    """Keep the table in the run directory (atomically), where the app finds it."""
    frame = table.copy()
    frame.attrs = {}
    frame["run_fingerprint"] = run.manifest["fingerprint"]
    run_files.write_parquet_atomic(frame, run.path / run_files.CORRELATION_TABLE)


def stored_correlations(run: StoredRun) -> pd.DataFrame | None:
    """The table last stored by ``qkviz report`` for this run, or ``None`` when there is none."""
    path = run.path / run_files.CORRELATION_TABLE
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError):
        return None
    if "run_fingerprint" not in frame or (frame.run_fingerprint != run.manifest["fingerprint"]).any():
        logger.warning("%s belongs to another extraction; make the report again", path)
        return None
    return frame.drop(columns="run_fingerprint")
