"""Layouts of large heads: fit on a stratified sample of the tokens, then place every other point on the fitted
picture (and, attn-tsne in 2D, polish the whole head over its own attention graph).

t-SNE and UMAP cost grows with the points: a head of 100,000 tokens is 200,000 points, minutes per head
on one core. Past ``sample`` tokens (a layout parameter, :data:`DEFAULT_SAMPLE` by default;
0 fits every token) a layout is fitted on a seeded sample of tokens (each sampled token brings its query and its key)
drawn from every stratum of (position in the sentence, token kind), so that first tokens, delimiters,
word pieces and late positions are all represented however rare. The other points are then placed on the
fitted picture:

* **attn-tsne, 2D** -- the whole head's attention graph is built (every query's strongest keys over the corpus,
  every key's strongest queries, the same-kind term: :func:`qkviz.projection.attention_graph.attention_graph`,
  its searches on inverted files, :mod:`qkviz.neighbours.top_k`); every other point starts at the weighted mean
  of its neighbours in it (:func:`spread_over_graph`), and then every point, sampled or not, moves for
  :data:`POLISH_ITER` t-SNE iterations over that graph (:func:`polish_tsne`): the full fit's objective, from a
  start that already has the fit's global shape, so that a token lands beside its partners whether they were
  sampled or not. What it measured is in ``docs/methods.md`` (``bench/scale.py --stages sample-cost``).
* **t-SNE, and attn-tsne in 3D** -- openTSNE's transform against the fixed sample: each new point's
  affinities to it (t-SNE: perplexity affinities over its nearest sampled points by cosine; attn-tsne: a new
  query's ``k`` strongest sampled keys, softmax weights over their logits, and with weight ``alpha`` its
  ``same_kind_k`` nearest sampled queries, a new key likewise with the sampled queries that score it highest), a
  start at their weighted mean, and a short optimisation (:data:`TRANSFORM_ITER` iterations,
  :data:`TRANSFORM_SETTINGS`).
* **UMAP / attn-umap** -- the weighted mean of the same neighbours (UMAP's transform starts there), with no
  optimisation after.

What the sample size costs in trustworthiness and partner recall, against a full fit, is measured by
``bench/scale.py`` (README, ``docs/scale.md``).
"""

from __future__ import annotations

import unicodedata

import numpy as np
import scipy.sparse as sp

from qkviz.core.logit_rule import LogitRule
from qkviz.neighbours.top_k import nearest_cosine, top_logits, unit_rows
from qkviz.projection.attention_graph import softmax_rows
from qkviz.projection.catalogue import Parameter

#: Tokens a t-SNE or UMAP layout is fitted on when a head has more: the others are placed on the fitted picture.
#: 0 fits every token. What it costs in faithfulness: bench/scale.py.
DEFAULT_SAMPLE = 20_000
#: How a 2D layout of a method with a ``polish_version`` places the other tokens, part of its cache key (older
#: entries are computed again): 2 -- placed at their sampled partners' weighted mean, then the whole head polished
#: over its attention graph (:func:`spread_over_graph`, :func:`polish_tsne`); entries without it placed them by
#: openTSNE's transform.
SAMPLED_PLACEMENT_VERSION = 2


def sample_parameter(default: int) -> Parameter:
    """The ``sample`` parameter of a method that fits a sample of a large head, with its own default."""
    return Parameter("sample", default, "whole", "fit each head on a stratified sample of this many tokens (every "
                     "position and token kind represented) and place the others on that picture; 0 fits every token",
                     low=0)


#: Sentence positions are stratified in these buckets (a bucket runs up to the next bound).
POSITION_BOUNDS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256)
#: Token kinds, the other stratum.
KINDS = ("special", "punctuation", "word", "word piece")
#: Every non-empty stratum gets at least this many tokens (or all it has).
MIN_PER_STRATUM = 5
#: The placed points' optimisation against the fixed sample (openTSNE's transform, with its learning rate 0.1
#: and exaggeration 1.5 raised to 1 and 1: on MiniLM layer 3 head 4, half its 5,000 tokens sampled, 100 such
#: iterations lifted trustworthiness from 0.70 (the weighted mean alone) to 0.76 and partner recall from 0.13 to
#: 0.16, where openTSNE's settings reached 0.71 and 0.14 in 50 iterations; a full fit scores 0.85 and 0.24)
TRANSFORM_ITER = 100
TRANSFORM_SETTINGS = {"learning_rate": 1.0, "exaggeration": 1.0, "momentum": 0.8, "max_grad_norm": 0.25}
#: t-SNE iterations of a sampled attn-tsne layout over the whole head's attention graph (openTSNE's defaults: no
#: exaggeration, momentum 0.8, learning rate ``n / 12``), about 0.2 s each at 100,000 tokens. On MiniLM layers/heads
#: 3/4 and 5/2 at 100,000 tokens, from a 10,000-token sample (the searches probing 16 cells), partner recall was
#: 0.092 / 0.165 after 40, 0.104 / 0.181 after 60 and 0.127 / 0.188 after 100 (full fits: 0.146 / 0.213); with 60,
#: all 72 MiniLM heads' default layouts took 29 min 49 s on 2 cores (bench/scale.py)
POLISH_ITER = 60
#: Jacobi sweeps spreading the fitted positions over the whole head's graph before the polish
SPREAD_ROUNDS = 10
#: Nearest sampled points whose perplexity affinities place a new point in a plain t-SNE (openTSNE's transform
#: uses perplexity 5 over 15 neighbours)
TRANSFORM_PERPLEXITY = 5.0


def token_kinds(tokens) -> np.ndarray:
    """int8 ``[n_tokens]`` index into :data:`KINDS` from a run's token table: special tokens; tokens of
    punctuation or symbols only; tokens starting a word; tokens continuing one (no space before them)."""
    texts = tokens["token"].to_numpy(dtype=object)
    special = tokens["is_special"].to_numpy(dtype=bool)
    punctuation = np.fromiter((bool(text) and all(unicodedata.category(c)[0] in "PS" for c in text)
                               for text in texts), dtype=bool, count=len(texts))
    start, end = tokens["char_start"].to_numpy(), tokens["char_end"].to_numpy()
    sentence = tokens["sentence"].to_numpy()
    continues = np.zeros(len(texts), dtype=bool)
    continues[1:] = (sentence[1:] == sentence[:-1]) & (start[1:] == end[:-1]) & (start[1:] > 0)
    kinds = np.full(len(texts), KINDS.index("word"), dtype=np.int8)
    kinds[continues] = KINDS.index("word piece")
    kinds[punctuation] = KINDS.index("punctuation")
    kinds[special] = KINDS.index("special")
    return kinds


def stratified_sample(tokens, size: int, seed: int = 0) -> np.ndarray:
    """Sorted int64 token indices: ``size`` tokens drawn at random (seeded) within each stratum of (position
    bucket, token kind), in proportion to its size but at least :data:`MIN_PER_STRATUM` from each (all the
    tokens of a smaller one). All tokens when ``size`` is 0 or at least their number."""
    n = len(tokens)
    if size <= 0 or size >= n:
        return np.arange(n, dtype=np.int64)
    buckets = np.searchsorted(POSITION_BOUNDS, tokens["position"].to_numpy(), side="right") - 1
    strata = buckets.astype(np.int64) * len(KINDS) + token_kinds(tokens)
    labels, inverse, counts = np.unique(strata, return_inverse=True, return_counts=True)
    quotas = np.minimum(counts, np.maximum(MIN_PER_STRATUM, np.floor(size * counts / n).astype(np.int64)))
    _fit_total(quotas, counts, size)
    rng = np.random.default_rng(seed)
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    chosen = [rng.choice(order[bounds[s]:bounds[s + 1]], size=int(quotas[s]), replace=False)
              for s in range(len(labels)) if quotas[s]]
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def _fit_total(quotas: np.ndarray, counts: np.ndarray, size: int) -> None:
    """Adjust ``quotas`` in place to sum to ``size``: the largest strata give or take one token at a time in
    turn, never below :data:`MIN_PER_STRATUM` (or their size) nor above their size."""
    floor = np.minimum(counts, MIN_PER_STRATUM)
    by_size = np.argsort(-counts, kind="stable")
    while (excess := int(quotas.sum()) - size) != 0:
        step = -1 if excess > 0 else 1
        movable = [s for s in by_size if (quotas[s] > floor[s] if step < 0 else quotas[s] < counts[s])]
        for stratum in movable[:abs(excess)]:
            quotas[stratum] += step


def sample_points(chosen: np.ndarray, n_tokens: int) -> np.ndarray:
    """Point indices (queries ``0..n-1``, keys ``n..2n-1``) of the sampled tokens: their queries, then keys."""
    return np.concatenate([chosen, n_tokens + chosen])


def attention_affinities(queries: np.ndarray, keys: np.ndarray, aligned: np.ndarray, chosen: np.ndarray,
                         rule: LogitRule, *, k: int, alpha: float, temperature: float, same_kind_k: int,
                         hidden_keys: np.ndarray | None = None) -> sp.csr_matrix:
    """``[2m, 2s]`` affinities (rows summing to 1) of the ``m`` unsampled tokens' points (queries, then keys)
    to the sampled points (their queries, then keys, as :func:`sample_points` orders them): the head's
    attention to the sampled tokens, and with weight ``alpha`` the nearest sampled points of the same kind.
    ``hidden_keys`` (sample positions) are left out of the queries' candidate keys (``hide_first_token``)."""
    n, s = len(queries), len(chosen)
    rest = np.setdiff1d(np.arange(n), chosen)
    m = len(rest)
    candidates = np.setdiff1d(np.arange(s), hidden_keys) if hidden_keys is not None else np.arange(s)
    found, logits = top_logits(queries[rest], keys[chosen][candidates], k, rule)
    to_keys = s + candidates[found]
    to_queries, key_logits = top_logits(keys[rest], queries[chosen], k, rule)
    rows = [np.repeat(np.arange(m), found.shape[1]), m + np.repeat(np.arange(m), to_queries.shape[1])]
    columns = [to_keys.ravel(), to_queries.ravel()]
    values = [softmax_rows(logits, temperature).ravel(), softmax_rows(key_logits, temperature).ravel()]
    if alpha > 0:
        for offset, own, reference in ((0, aligned[rest], aligned[chosen]),
                                       (s, aligned[n + rest], aligned[n + chosen])):
            near = nearest_cosine(own, reference, same_kind_k)
            rows.append((m if offset else 0) + np.repeat(np.arange(m), near.shape[1]))
            columns.append(offset + near.ravel())
            values.append(np.full(near.size, alpha / near.shape[1]))
    matrix = sp.csr_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))),
                           shape=(2 * m, 2 * s))
    return _rows_to_one(matrix)


def perplexity_affinities(rest_points: np.ndarray, reference: np.ndarray, perplexity: float = TRANSFORM_PERPLEXITY
                          ) -> sp.csr_matrix:
    """``[m, s]`` affinities (rows summing to 1) of new points to their ``3 * perplexity`` nearest sampled
    points (cosine), at ``perplexity``: what openTSNE's transform computes for a new point."""
    from openTSNE.affinity import joint_probabilities_nn

    k = min(len(reference), int(3 * perplexity))
    near, cosines = top_logits(unit_rows(rest_points), unit_rows(reference), k, LogitRule(scale=1.0))
    distances = 1.0 - cosines
    matrix = joint_probabilities_nn(near, np.maximum(distances, 0.0), [min(perplexity, (k - 1) / 3 or 1.0)],
                                    symmetrize=False, normalization="point-wise", n_reference_samples=len(reference),
                                    n_jobs=1)
    return _rows_to_one(sp.csr_matrix(matrix))


def place(affinities: sp.csr_matrix, reference: np.ndarray) -> np.ndarray:
    """Each new point at the affinity-weighted mean of the reference coordinates."""
    return np.asarray(affinities @ reference.astype(np.float64), dtype=np.float64)


def refine_tsne(reference, affinities: sp.csr_matrix, start: np.ndarray, n_iter: int = TRANSFORM_ITER) -> np.ndarray:
    """openTSNE's transform optimisation of new points ``start`` against the fixed ``reference``
    (a ``TSNEEmbedding``) with ``affinities`` ``[m, s]`` to it."""
    from openTSNE import PartialTSNEEmbedding

    if n_iter == 0 or len(start) == 0:
        return start
    partial = PartialTSNEEmbedding(start, reference, P=affinities, **reference.gradient_descent_params)
    partial = partial.optimize(n_iter=n_iter, **TRANSFORM_SETTINGS)
    return np.asarray(partial, dtype=np.float64)


def spread_over_graph(graph: sp.csr_matrix, fitted: np.ndarray, fitted_points: np.ndarray,
                      rounds: int = SPREAD_ROUNDS) -> np.ndarray:
    """float64 ``[2n, dim]``: the fitted points where they are, every other point at the affinity-weighted mean
    of its neighbours in the whole head's ``graph`` -- the fitted ones to start with (the centre of the picture
    for a point with none), then ``rounds`` Jacobi sweeps of the weighted mean over all its neighbours, so that
    a point whose partners were not sampled moves to them too."""
    n_points = graph.shape[0]
    fixed = np.zeros(n_points, dtype=bool)
    fixed[fitted_points] = True
    rest = np.flatnonzero(~fixed)
    rows = graph[rest]
    to_fitted, to_rest = rows[:, fitted_points], rows[:, rest]
    anchored = to_fitted @ fitted.astype(np.float64)
    fitted_weight = np.asarray(to_fitted.sum(axis=1)).ravel()
    placed = np.where(fitted_weight[:, None] > 0, anchored / np.maximum(fitted_weight, 1e-300)[:, None],
                      fitted.mean(axis=0))
    total = fitted_weight + np.asarray(to_rest.sum(axis=1)).ravel()
    linked = total > 0
    for _ in range(rounds):
        swept = (anchored + to_rest @ placed) / np.where(linked, total, 1.0)[:, None]
        placed = np.where(linked[:, None], swept, placed)
    coordinates = np.empty((n_points, fitted.shape[1]), dtype=np.float64)
    coordinates[fitted_points] = fitted
    coordinates[rest] = placed
    return coordinates


def polish_tsne(start: np.ndarray, graph, seed: int, n_iter: int = POLISH_ITER, fft: dict | None = None) -> np.ndarray:
    """float32 ``[2n, 2]``: the whole head's layout ``start`` after ``n_iter`` t-SNE iterations (FFT gradients on
    openTSNE's grid, or ``fft``'s: :func:`qkviz.projection.tsne_embedding.fft_grid`) over ``graph``
    (:class:`qkviz.projection.attention_graph.AttentionGraph` of every token)."""
    from openTSNE import TSNEEmbedding, affinity

    if n_iter == 0:
        return start.astype(np.float32)
    embedding = TSNEEmbedding(np.asarray(start, dtype=np.float64), affinity.PrecomputedAffinities(graph.matrix),
                              negative_gradient_method="fft", n_jobs=1, random_state=seed, **(fft or {}))
    return np.asarray(embedding.optimize(n_iter=n_iter, momentum=0.8), dtype=np.float32)


def assemble(sample_coordinates: np.ndarray, rest_coordinates: np.ndarray, chosen: np.ndarray,
             n_tokens: int) -> np.ndarray:
    """float32 ``[2n, dim]``: the sampled tokens' points and the placed ones back in point order."""
    rest = np.setdiff1d(np.arange(n_tokens), chosen)
    coordinates = np.empty((2 * n_tokens, sample_coordinates.shape[1]), dtype=np.float32)
    coordinates[sample_points(chosen, n_tokens)] = sample_coordinates
    coordinates[np.concatenate([rest, n_tokens + rest])] = rest_coordinates
    return coordinates


def _rows_to_one(matrix: sp.csr_matrix) -> sp.csr_matrix:
    sums = np.asarray(matrix.sum(axis=1)).ravel()
    return sp.csr_matrix(sp.diags(1.0 / np.where(sums > 0, sums, 1.0)) @ matrix)

