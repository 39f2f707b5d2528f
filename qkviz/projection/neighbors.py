"""One nearest-neighbour graph per head, shared by t-SNE and UMAP.

Both methods start from the k nearest neighbours of every point; computing them once per head
(exactly, by brute force, which on a few ten thousand points of a head's 32 to 128 dimensions is
faster than building an approximate index) saves the larger part of UMAP's time and all of
t-SNE's neighbour search. Cosine neighbours are Euclidean neighbours of the unit vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.projection.catalogue import Parameter

#: Neighbour distances UMAP and t-SNE can use.
METRICS = ("euclidean", "cosine")
#: The ``metric`` parameter of the methods that read a neighbour graph.
METRIC = Parameter("metric", "cosine", "choice", "neighbour distance (cosine, as AttentionViz)", choices=("cosine", "euclidean"))


@dataclass(frozen=True)
class NeighborGraph:
    """``indices`` and ``distances`` ``[n_points, k]``, each row starting with the point itself."""

    indices: np.ndarray
    distances: np.ndarray
    metric: str

    @property
    def k(self) -> int:
        return self.indices.shape[1]

    def first(self, k: int) -> "NeighborGraph":
        return NeighborGraph(self.indices[:, :k], self.distances[:, :k], self.metric)


def neighbor_graph(points: np.ndarray, k: int, metric: str = "euclidean") -> NeighborGraph:
    """Exact ``k`` nearest neighbours (self included) of every point under ``metric``."""
    from sklearn.neighbors import NearestNeighbors

    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)}")
    points = np.asarray(points, dtype=np.float32)
    if metric == "cosine":
        norms = np.linalg.norm(points, axis=1, keepdims=True)
        points = points / np.where(norms > 0, norms, 1.0)
    k = min(k, len(points))
    distances, indices = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(points).kneighbors(points)
    if metric == "cosine":
        distances = distances ** 2 / 2  # |a - b|^2 / 2 = 1 - cos(a, b) for unit vectors
    # A duplicate point may come before the point itself; put the point first in its own row.
    own = indices == np.arange(len(points))[:, None]
    missing = ~own.any(axis=1)
    indices[missing, -1] = np.flatnonzero(missing)
    order = np.argsort(~(indices == np.arange(len(points))[:, None]), axis=1, kind="stable")
    indices = np.take_along_axis(indices, order, axis=1)
    distances = np.take_along_axis(distances, order, axis=1)
    distances[:, 0] = 0.0
    return NeighborGraph(indices.astype(np.int64), distances.astype(np.float32), metric)
