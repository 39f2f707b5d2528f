"""openTSNE's optimisation, shared by ``tsne`` and ``attn-tsne`` (which differ only in their affinities).

2D: openTSNE with FFT gradients, in two phases (early exaggeration, then the rest). openTSNE has no FFT path
in 3D, so a 3D layout is the 2D one lifted by a small third coordinate and refined with Barnes-Hut. ``tsne``'s
defaults come from ``bench/project.py`` and trials on MiniLM heads of 10,000 points: short optimisations (125 +
125 iterations, 3D refined from the 2D layout for 50) whose trustworthiness is within 0.01 of runs several times
longer. Each method declares its own schedule (:func:`schedule`): ``attn-tsne``'s is shorter and its FFT grid
coarser (``bench/thousand_heads.py``).

The FFT gradients interpolate the repulsion on a grid of at least ``fft_min_cells`` cells a side, each at most
``fft_cell_width`` wide (openTSNE's ``min_num_intervals`` 50 and ``ints_in_interval`` 1 by default). The grid,
not the points, dominates an iteration of 18,000 points: 20 ms of an iteration's 25 at openTSNE's 50 cells, about
4-8 ms at 10-20 cells of width 2-3 (one core), for the same partner recall and trustworthiness.
"""

from __future__ import annotations

import numpy as np

from qkviz.projection.catalogue import Parameter



def schedule(early_exaggeration_iter: int = 125, n_iter: int = 125, fft_min_cells: int = 50,
             fft_cell_width: float = 1.0) -> tuple[Parameter, ...]:
    """The optimisation's parameters as a t-SNE method declares them, with its own defaults (openTSNE's FFT grid
    by default)."""
    return (
        Parameter("early_exaggeration_iter", early_exaggeration_iter, "whole",
                  "t-SNE iterations with early exaggeration", low=0),
        Parameter("n_iter", n_iter, "whole", "t-SNE iterations after early exaggeration", low=1),
        Parameter("n_iter_3d", 50, "whole", "3D t-SNE: Barnes-Hut iterations refining the lifted 2D layout", low=1,
                  only_3d=True),
        Parameter("fft_min_cells", fft_min_cells, "whole", "2D t-SNE: the FFT gradients' interpolation grid has at "
                  "least this many cells a side (openTSNE's min_num_intervals)", low=1),
        Parameter("fft_cell_width", fft_cell_width, "real", "2D t-SNE: and cells at most this wide, in layout "
                  "units (openTSNE's ints_in_interval; larger is coarser and faster)", low=0.0, low_open=True),
    )


def fft_grid(params: dict) -> dict:
    """openTSNE's keyword arguments for the FFT grid of a method's ``params``."""
    return {"min_num_intervals": int(params["fft_min_cells"]), "ints_in_interval": float(params["fft_cell_width"])}
#: The third coordinate of a lifted 3D t-SNE starts at this fraction of the 2D layout's spread.
LIFT_SCALE = 0.3


def optimise(points: np.ndarray, dim: int, seed: int, params: dict, affinities, start_2d: np.ndarray | None):
    """``(float32 coordinates, openTSNE's embedding)`` (the embedding can place new points). 2D: openTSNE with FFT
    gradients (early exaggeration, then the rest). 3D: the 2D layout (``start_2d``, or made here) lifted by a
    small third coordinate (the points' third principal component) and refined for ``n_iter_3d`` Barnes-Hut
    iterations; a full 3D run from scratch costs five times as much for the same trustworthiness."""
    from openTSNE import TSNEEmbedding, initialization

    if start_2d is None or dim == 2:
        start = initialization.pca(points, n_components=2, random_state=seed)  # rescaled to std 1e-4
        embedding = TSNEEmbedding(start, affinities, negative_gradient_method="fft", n_jobs=1, random_state=seed,
                                  **fft_grid(params))
        embedding = embedding.optimize(n_iter=params["early_exaggeration_iter"], exaggeration=12, momentum=0.5)
        embedding = embedding.optimize(n_iter=params["n_iter"], momentum=0.8)
        start_2d = np.asarray(embedding, dtype=np.float32)
        if dim == 2:
            return start_2d, embedding
    third = initialization.pca(points, n_components=3, random_state=seed)[:, 2:]
    lifted = np.hstack([start_2d, third / (third.std() or 1.0) * start_2d.std() * LIFT_SCALE]).astype(np.float64)
    embedding = TSNEEmbedding(lifted, affinities, negative_gradient_method="bh", theta=1.0, n_jobs=1,
                              random_state=seed).optimize(n_iter=params["n_iter_3d"], momentum=0.8)
    return np.asarray(embedding, dtype=np.float32), embedding
