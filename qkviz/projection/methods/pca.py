"""``pca``: the aligned points' principal components. Milliseconds a head, so every head has it at once; distances
only roughly follow attention."""

from __future__ import annotations

import numpy as np

from qkviz.projection.catalogue import FitInputs, Projection, ProjectionMethod, register


def fit(inputs: FitInputs) -> Projection:
    from sklearn.decomposition import PCA
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):     # milliseconds on one thread; two threads beside other work spin for 0.5 s
        coordinates = PCA(n_components=inputs.dim, random_state=inputs.seed).fit_transform(inputs.points)
    return Projection(coordinates.astype(np.float32), inputs.params, {})


register(ProjectionMethod(
    name="pca", label="PCA", parameters=(), fit=fit, rank=40, instant=True, axes=("PC1", "PC2", "PC3"),
    summary="principal components: seconds for every head"))
