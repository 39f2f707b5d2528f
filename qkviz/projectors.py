"""Projecting one head's aligned query/key cloud to 2D or 3D: PCA, UMAP, t-SNE.

Each method is a pure function of the points, the dimension, a seed and its parameters, returning
float32 coordinates and the parameters actually used (a perplexity or neighbour count too large
for the number of points is reduced, and the reduction is recorded). t-SNE is openTSNE's: FFT
interpolation in 2D; openTSNE has no FFT path in 3D, so 3D uses Barnes-Hut, several times slower.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from qkviz.errors import QkvizError

logger = logging.getLogger(__name__)

METHODS = ("pca", "umap", "tsne")
DIMENSIONS = (2, 3)
DEFAULT_PARAMS: dict[str, dict] = {
    "pca": {},
    "umap": {"n_neighbors": 15, "min_dist": 0.1, "metric": "euclidean"},
    "tsne": {"perplexity": 30.0, "n_iter": 500, "metric": "euclidean"},
}


@dataclass(frozen=True)
class Projection:
    coordinates: np.ndarray   # float32 [n_points, dim]
    params: dict              # the parameters used, after any adjustment
    adjusted: dict            # {name: (asked, used)} for parameters reduced to fit the data


def check_method(method: str, dim: int) -> None:
    if method not in METHODS:
        raise QkvizError(f"unknown projection method {method!r}; choose from {', '.join(METHODS)}")
    if dim not in DIMENSIONS:
        raise QkvizError(f"unknown dimension {dim}; choose 2 or 3")


def resolve_params(method: str, params: dict) -> dict:
    """The method's defaults overridden by ``params``; unknown names are refused."""
    unknown = set(params) - set(DEFAULT_PARAMS[method])
    if unknown:
        raise QkvizError(f"{method} has no parameter {', '.join(sorted(unknown))}; "
                         f"it takes {', '.join(DEFAULT_PARAMS[method]) or 'none'}")
    return {**DEFAULT_PARAMS[method], **params}


def project(points: np.ndarray, method: str, dim: int, seed: int = 0, **params) -> Projection:
    """Project ``points`` ``[n_points, d]`` with ``method`` into ``dim`` dimensions."""
    check_method(method, dim)
    params = resolve_params(method, params)
    points = np.ascontiguousarray(points, dtype=np.float32)
    if len(points) < 4:
        raise QkvizError(f"{len(points)} points are too few to project; extract more tokens")
    project_with = {"pca": _pca, "umap": _umap, "tsne": _tsne}[method]
    coordinates, used, adjusted = project_with(points, dim, seed, params)
    return Projection(np.ascontiguousarray(coordinates, dtype=np.float32), used, adjusted)


def _pca(points, dim, seed, params):
    from sklearn.decomposition import PCA

    return PCA(n_components=dim, random_state=seed).fit_transform(points), params, {}


def _umap(points, dim, seed, params):
    import umap

    used, adjusted = dict(params), {}
    if used["n_neighbors"] >= len(points):
        used["n_neighbors"] = len(points) - 1
        adjusted["n_neighbors"] = (params["n_neighbors"], used["n_neighbors"])
    reducer = umap.UMAP(n_components=dim, n_neighbors=used["n_neighbors"], min_dist=used["min_dist"],
                        metric=used["metric"], random_state=seed, n_jobs=1)
    return reducer.fit_transform(points), used, adjusted


def _tsne(points, dim, seed, params):
    import openTSNE

    used, adjusted = dict(params), {}
    largest = (len(points) - 1) / 3
    if used["perplexity"] > largest:
        used["perplexity"] = float(largest)
        adjusted["perplexity"] = (params["perplexity"], used["perplexity"])
    embedding = openTSNE.TSNE(
        n_components=dim, perplexity=used["perplexity"], n_iter=used["n_iter"], metric=used["metric"],
        negative_gradient_method="fft" if dim == 2 else "bh", random_state=seed, n_jobs=1,
    ).fit(points)
    return np.asarray(embedding), used, adjusted
