"""How many clusters a set of tokens (a search's matches) forms in each head's layout.

The cluster count of a head is the number of connected groups the tokens' queries and keys form in its
normalised 2D layout: the unit square is cut into ``grid`` x ``grid`` cells, and occupied cells that touch
(sides or corners) join one cluster -- single-linkage clustering at a radius of about one cell, for every
head at once with one labelling pass. Few clusters suggest a head that groups the tokens by meaning; many,
one that spreads them by position.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

#: cells per side of the grid the cluster count is taken on (a cluster radius of ~4% of the layout).
CLUSTER_GRID = 24
#: in-plane neighbours only: clusters never join across heads.
_IN_PLANE = np.zeros((3, 3, 3), dtype=bool)
_IN_PLANE[1] = True


def cluster_counts(points: np.ndarray, tokens: np.ndarray, grid: int = CLUSTER_GRID) -> np.ndarray:
    """int64 ``[head]``: clusters formed by the tokens' queries and keys in each head's layout.

    ``points`` is ``[head, 2 * n_tokens, 2]`` in the unit square (queries first; NaN for a head
    without a layout, which gets -1); ``tokens`` int64 ``[n_matches]`` indices into the run's tokens."""
    n_heads, n_points = points.shape[:2]
    counts = np.zeros(n_heads, dtype=np.int64)
    missing = np.isnan(points[:, 0, 0])
    if len(tokens):
        chosen = points[:, np.concatenate([tokens, tokens + n_points // 2])]        # [head, match, 2]
        cells = np.clip(np.nan_to_num(chosen * grid).astype(np.int64), 0, grid - 1)
        occupied = np.zeros((n_heads, grid, grid), dtype=bool)
        heads = np.repeat(np.arange(n_heads), cells.shape[1])
        occupied[heads, cells[..., 0].ravel(), cells[..., 1].ravel()] = True
        occupied[missing] = False
        labels, _ = ndimage.label(occupied, structure=_IN_PLANE)
        # labels are numbered in raster order and never span heads: each head owns a contiguous range
        last = np.maximum.accumulate(labels.reshape(n_heads, -1).max(axis=1))
        counts = np.diff(last, prepend=0)
    counts[missing] = -1
    return counts
