"""Exact top-k by dot product over a head's vectors, with faiss's brute-force search (one thread).

The same result as :func:`qkviz.core.partners.top_partners` (numpy; ``qkviz.core`` stays numpy-only),
about 8x faster: faiss keeps a heap per row where numpy partitions every row of scores. Ties at the
``k``-th best may be broken differently.
"""

from __future__ import annotations

import numpy as np


def top_logits(rows: np.ndarray, columns: np.ndarray, k: int, scale: float, softcap: float | None = None):
    """``(indices [n_rows, k] int64, logits [n_rows, k] float64)``: each row's ``k`` columns of highest
    ``scale * row . column`` (soft-capped), best first -- :func:`qkviz.core.partners.top_partners`, by faiss's
    exact search (BLAS and a heap: 8x faster than numpy's partition at 15,000 x 5,000 on one core)."""
    import faiss

    faiss.omp_set_num_threads(1)   # a head is one core's work: two threads beside other work took 0.92 s, one 0.55 s
    k = min(k, len(columns))
    products, found = faiss.knn(np.ascontiguousarray(rows, dtype=np.float32),
                                np.ascontiguousarray(columns, dtype=np.float32), k, metric=faiss.METRIC_INNER_PRODUCT)
    logits = products.astype(np.float64) * scale
    if softcap:
        logits = softcap * np.tanh(logits / softcap)
    return found.astype(np.int64), logits


def nearest_cosine(rows: np.ndarray, reference: np.ndarray, k: int) -> np.ndarray:
    """int64 ``[n_rows, k]``: each row's ``k`` nearest ``reference`` points by cosine, nearest first."""
    return top_logits(unit_rows(rows), unit_rows(reference), k, 1.0)[0]


def unit_rows(points: np.ndarray) -> np.ndarray:
    points = np.asarray(points, dtype=np.float32)
    norms = np.linalg.norm(points, axis=1, keepdims=True)
    return points / np.where(norms > 0, norms, 1.0)
