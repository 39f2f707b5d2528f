"""``umap``: UMAP over the head's nearest-neighbour graph of the aligned points.

Cosine neighbours (as in AttentionViz), 200 epochs with ``min_dist`` 0 (``min_dist`` 0.1 and 500 epochs scored
0.005 to 0.01 lower in trustworthiness on MiniLM heads, at twice the time). A 3D layout runs ``n_epochs_3d``
(100) epochs instead: with a third axis to spread into, it keeps nearly the same neighbourhoods in half the
epochs, and at 200 it took longer than the AttentionViz recipe's 3D UMAP (issue 39). It starts from PCA (umap's spectral
start fails on components of identical points, as layer-0 heads have) and draws 20 negative samples per edge,
not 5: ``bench/faithful.py``'s sweep raised trustworthiness from 0.889 to 0.910 (MiniLM) and 0.929 to 0.945
(SmolLM2) for about twice the time (``docs/methods.md``).
"""

from __future__ import annotations

import warnings

import numpy as np

from qkviz.projection.catalogue import FitInputs, Parameter, Projection, ProjectionMethod, register
from qkviz.projection.neighbors import METRIC, NeighborGraph, neighbor_graph
from qkviz.projection.sampling import DEFAULT_SAMPLE, sample_parameter

#: UMAP's start from the points' principal components (umap's own ``init="spectral"`` fails on layer-0 heads)
PCA_START = "pca"
#: UMAP's layout parameters, shared with ``attn-umap``
MIN_DIST = Parameter("min_dist", 0.0, "real", "UMAP minimum distance", low=0.0)
N_EPOCHS = Parameter("n_epochs", 200, "whole", "UMAP epochs", low=1)
#: the epochs of a 3D ``umap`` layout (2D layouts' settings leave it out, so their cache entries are unchanged)
N_EPOCHS_3D = Parameter("n_epochs_3d", 100, "whole", "3D UMAP: epochs of a 3D layout, in place of --n-epochs", low=1,
                        only_3d=True)


def neighbours_needed(params: dict, n_points: int) -> int:
    return min(int(params["n_neighbors"]), n_points - 1) + 1


def fit(inputs: FitInputs) -> Projection:
    import umap

    params, needed = inputs.params, neighbours_needed(inputs.params, len(inputs.points))
    graph: NeighborGraph | None = inputs.neighbours
    if graph is None or graph.k < needed or graph.metric != params["metric"]:
        graph = neighbor_graph(inputs.points, needed, params["metric"])
    graph = graph.first(needed)
    used, adjusted = dict(params), {}
    if graph.k - 1 < params["n_neighbors"]:
        used["n_neighbors"] = graph.k - 1
        adjusted["n_neighbors"] = (params["n_neighbors"], used["n_neighbors"])
    epochs = used["n_epochs_3d"] if inputs.dim == 3 else used["n_epochs"]
    reducer = umap.UMAP(n_components=inputs.dim, n_neighbors=used["n_neighbors"], min_dist=used["min_dist"],
                        n_epochs=epochs, metric=used["metric"], init=used["init"],
                        negative_sample_rate=used["negative_sample_rate"], random_state=inputs.seed, n_jobs=1,
                        precomputed_knn=(graph.indices, graph.distances, None))
    with warnings.catch_warnings():   # no search index comes with our neighbours: umap's transform() is not used
        warnings.filterwarnings("ignore", message=r"precomputed_knn\[2\]", category=UserWarning)
        return Projection(reducer.fit_transform(inputs.points).astype(np.float32), used, adjusted)


def compile_numba() -> None:
    """UMAP's numba code, compiled once per worker process rather than in its first head."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        points = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
        fit(FitInputs(points, 2, 0, {parameter.name: parameter.default for parameter in PARAMETERS} | {"n_epochs": 10}))


PARAMETERS = (
    Parameter("n_neighbors", 15, "whole", "UMAP neighbours", low=2),
    MIN_DIST,
    N_EPOCHS,
    N_EPOCHS_3D,
    METRIC,
    Parameter("init", PCA_START, "choice", "UMAP's starting layout (spectral, umap's own, fails on some heads and "
              "falls back to random)", choices=(PCA_START, "spectral")),
    Parameter("negative_sample_rate", 20, "whole", "UMAP negative samples per edge and epoch (umap's own 5 keeps "
              "fewer neighbourhoods)", low=1),
    sample_parameter(DEFAULT_SAMPLE),
)

register(ProjectionMethod(
    name="umap", label="UMAP", parameters=PARAMETERS, fit=fit, rank=30,
    summary="UMAP of the aligned points' nearest neighbours", neighbours_needed=neighbours_needed,
    warm_up=compile_numba))
