"""Projecting one head's aligned query/key cloud to 2D or 3D: PCA, UMAP, t-SNE, and the
attention-faithful ``attn-tsne`` / ``attn-umap``, whose neighbour graph is the head's attention
(:mod:`qkviz.projection.attention_graph`) instead of distances between the aligned points.

Each method is a pure function of the points, the dimension, a seed and its parameters, returning
float32 coordinates and the parameters actually used (a perplexity or neighbour count too large
for the number of points is reduced, and the reduction is recorded). UMAP and t-SNE can share one
:class:`~qkviz.projection.neighbors.NeighborGraph`. t-SNE is openTSNE's, optimised in two phases (early
exaggeration, then the rest): FFT interpolation in 2D; openTSNE has no FFT path in 3D, so 3D uses
Barnes-Hut, several times slower.

Defaults come from ``bench/project.py`` and trials on MiniLM heads of 10,000 points: cosine
neighbours (as in AttentionViz), and short optimisations (t-SNE 125 + 125 iterations, UMAP 200
epochs with ``min_dist`` 0, 3D t-SNE refined from the 2D one for 50 iterations) whose
trustworthiness is within 0.01 of runs several times longer (UMAP with ``min_dist`` 0.1 and 500
epochs scored 0.005 to 0.01 lower than ``min_dist`` 0 and 200 epochs, at twice the time). UMAP starts
from PCA (umap's spectral start fails on components of identical points, as layer-0 heads have) and
draws 20 negative samples per edge, not 5: ``bench/faithful.py``'s sweep raised trustworthiness from
0.889 to 0.910 (MiniLM) and 0.929 to 0.945 (SmolLM2) for about twice the time (``docs/methods.md``).
"""

from __future__ import annotations

import warnings

from dataclasses import dataclass

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.projection.attention_graph import AttentionGraph
from qkviz.projection.neighbors import NeighborGraph, neighbor_graph
from qkviz.store.projections import ATTENTION_METHODS, check_method, resolve_params


@dataclass(frozen=True)
class Projection:
    coordinates: np.ndarray   # float32 [n_points, dim]
    params: dict              # the parameters used, after any adjustment
    adjusted: dict            # {name: (asked, used)} for parameters reduced to fit the data
    reference: object = None  # t-SNE: openTSNE's embedding of these points, for placing others on it


def neighbors_needed(method: str, params: dict, n_points: int) -> int:
    """How many neighbours (self included) ``method`` reads from a shared graph."""
    if method == "umap":
        return min(int(params["n_neighbors"]), n_points - 1) + 1
    if method == "tsne":
        return min(int(3 * _fitting_perplexity(params["perplexity"], n_points)), n_points - 1) + 1
    return 0


def project_points(points: np.ndarray, method: str, dim: int, seed: int = 0, graph: NeighborGraph | None = None,
                   tsne_2d: np.ndarray | None = None, attention: AttentionGraph | None = None, **params) -> Projection:
    """Project ``points`` ``[n_points, d]`` with ``method`` into ``dim`` dimensions.

    ``graph``, when given, must hold at least :func:`neighbors_needed` neighbours under the
    method's metric; otherwise the method computes its own. ``tsne_2d``, for a 3D t-SNE, is the 2D
    t-SNE of the same points, parameters and seed (it is computed when not given; passing it only
    saves that time). The attention methods need ``attention``, the head's
    :func:`~qkviz.projection.attention_graph.attention_graph` over these points."""
    check_method(method, dim)
    params = resolve_params(method, params, dim)
    points = np.ascontiguousarray(points, dtype=np.float32)
    if len(points) < 4:
        raise QkvizError(f"{len(points)} points are too few to project; extract more tokens")
    if method == "pca":
        return _pca(points, dim, seed, params)
    if method in ATTENTION_METHODS:
        if attention is None or attention.matrix.shape[0] != len(points):
            raise ValueError(f"{method} needs the attention graph of these {len(points)} points")
        if method == "attn-umap":
            return _attention_umap(points, dim, seed, params, attention)
        coordinates, reference = _tsne(points, dim, seed, params, _precomputed(attention), tsne_2d)
        return Projection(coordinates, params, {}, reference)
    needed = neighbors_needed(method, params, len(points))
    if graph is None or graph.k < needed or graph.metric != params["metric"]:
        graph = neighbor_graph(points, needed, params["metric"])
    if method == "umap":
        return _umap(points, dim, seed, params, graph.first(needed))
    used = dict(params)
    affinities, adjusted = _perplexity_affinities(graph.first(needed), used, len(points), seed)
    coordinates, reference = _tsne(points, dim, seed, used, affinities, tsne_2d)
    return Projection(coordinates, used, adjusted, reference)


def _pca(points, dim, seed, params) -> Projection:
    from sklearn.decomposition import PCA
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):     # milliseconds on one thread; two threads beside other work spin for 0.5 s
        return Projection(PCA(n_components=dim, random_state=seed).fit_transform(points).astype(np.float32), params, {})


def _umap(points, dim, seed, params, graph: NeighborGraph) -> Projection:
    import umap

    used, adjusted = dict(params), {}
    if graph.k - 1 < params["n_neighbors"]:
        used["n_neighbors"] = graph.k - 1
        adjusted["n_neighbors"] = (params["n_neighbors"], used["n_neighbors"])
    reducer = umap.UMAP(n_components=dim, n_neighbors=used["n_neighbors"], min_dist=used["min_dist"],
                        n_epochs=used["n_epochs"], metric=used["metric"], init=used["init"],
                        negative_sample_rate=used["negative_sample_rate"], random_state=seed, n_jobs=1,
                        precomputed_knn=(graph.indices, graph.distances, None))
    with warnings.catch_warnings():   # no search index comes with our neighbours: umap's transform() is not used
        warnings.filterwarnings("ignore", message=r"precomputed_knn\[2\]", category=UserWarning)
        return Projection(reducer.fit_transform(points).astype(np.float32), used, adjusted)


def _fitting_perplexity(perplexity: float, n_points: int) -> float:
    return float(min(perplexity, (n_points - 1) / 3))


def _perplexity_affinities(graph: NeighborGraph, used: dict, n_points: int, seed: int):
    """t-SNE's affinities from the distance graph, at a perplexity that fits the points (``used`` is updated)."""
    from openTSNE import affinity
    from openTSNE.nearest_neighbors import PrecomputedNeighbors

    adjusted = {}
    fitting = _fitting_perplexity(used["perplexity"], n_points)
    if fitting != used["perplexity"]:
        adjusted["perplexity"] = (used["perplexity"], fitting)
        used["perplexity"] = fitting
    return affinity.PerplexityBasedNN(
        perplexity=used["perplexity"], knn_index=PrecomputedNeighbors(graph.indices[:, 1:], graph.distances[:, 1:]),
        n_jobs=1, random_state=seed), adjusted


def _precomputed(attention: AttentionGraph):
    from openTSNE import affinity

    return affinity.PrecomputedAffinities(attention.matrix, normalize=True)


def _attention_umap(points, dim, seed, params, attention: AttentionGraph) -> Projection:
    """UMAP's layout optimisation (``simplicial_set_embedding``) over the attention graph instead of its
    own fuzzy neighbour graph; edge weights, scaled to a maximum of 1, set how often each edge is sampled."""
    import umap.umap_ as umap_

    graph = (attention.matrix / attention.matrix.max()).tocoo()
    a, b = umap_.find_ab_params(1.0, params["min_dist"])
    coordinates, _ = umap_.simplicial_set_embedding(
        points, graph, dim, 1.0, a, b, 1.0, 5, params["n_epochs"], "pca", np.random.RandomState(seed), "euclidean",
        {}, False, {}, False)
    return Projection(np.asarray(coordinates, dtype=np.float32), dict(params), {})


def _tsne(points, dim, seed, used: dict, affinities, tsne_2d: np.ndarray | None):
    """2D: openTSNE with FFT gradients (early exaggeration, then the rest). 3D: the 2D layout lifted
    by a small third coordinate (the points' third principal component) and refined for
    ``n_iter_3d`` Barnes-Hut iterations, openTSNE having no FFT path in 3D; a full 3D run from
    scratch costs five times as much for the same trustworthiness. Returns the float32 coordinates and
    openTSNE's embedding (which can place new points)."""
    from openTSNE import TSNEEmbedding, initialization

    if tsne_2d is None or dim == 2:
        start = initialization.pca(points, n_components=2, random_state=seed)  # rescaled to std 1e-4
        embedding = TSNEEmbedding(start, affinities, negative_gradient_method="fft", n_jobs=1, random_state=seed)
        embedding = embedding.optimize(n_iter=used["early_exaggeration_iter"], exaggeration=12, momentum=0.5)
        embedding = embedding.optimize(n_iter=used["n_iter"], momentum=0.8)
        tsne_2d = np.asarray(embedding, dtype=np.float32)
        if dim == 2:
            return tsne_2d, embedding
    third = initialization.pca(points, n_components=3, random_state=seed)[:, 2:]
    lifted = np.hstack([tsne_2d, third / (third.std() or 1.0) * tsne_2d.std() * LIFT_SCALE]).astype(np.float64)
    embedding = TSNEEmbedding(lifted, affinities, negative_gradient_method="bh", theta=1.0, n_jobs=1,
                              random_state=seed).optimize(n_iter=used["n_iter_3d"], momentum=0.8)
    return np.asarray(embedding, dtype=np.float32), embedding


#: The third coordinate of a lifted 3D t-SNE starts at this fraction of the 2D layout's spread.
LIFT_SCALE = 0.3
