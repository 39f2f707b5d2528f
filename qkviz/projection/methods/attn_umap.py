"""``attn-umap``: UMAP's layout optimisation (``simplicial_set_embedding``) over the head's attention graph
(:mod:`qkviz.projection.attention_graph`) instead of its own fuzzy neighbour graph; edge weights, scaled to a
maximum of 1, set how often each edge is sampled."""

from __future__ import annotations

import numpy as np

from qkviz.projection.attention_graph import graph_parameters
from qkviz.projection.catalogue import FitInputs, Projection, ProjectionMethod, register
from qkviz.projection.methods.umap import MIN_DIST, N_EPOCHS, PCA_START, compile_numba
from qkviz.projection.sampling import DEFAULT_SAMPLE, sample_parameter


def fit(inputs: FitInputs) -> Projection:
    import umap.umap_ as umap_

    matrix = inputs.attention.matrix
    graph = (matrix / matrix.max()).tocoo()
    a, b = umap_.find_ab_params(1.0, inputs.params["min_dist"])
    coordinates, _ = umap_.simplicial_set_embedding(
        inputs.points, graph, inputs.dim, 1.0, a, b, 1.0, 5, inputs.params["n_epochs"], PCA_START,
        np.random.RandomState(inputs.seed), "euclidean", {}, False, {}, False)
    return Projection(np.asarray(coordinates, dtype=np.float32), dict(inputs.params), {})


register(ProjectionMethod(
    name="attn-umap", label="attention UMAP", fit=fit, rank=20, uses_attention=True,
    summary="UMAP's optimisation over the head's attention graph", warm_up=compile_numba,
    parameters=(*graph_parameters(alpha=1.0), MIN_DIST, N_EPOCHS, sample_parameter(DEFAULT_SAMPLE))))
