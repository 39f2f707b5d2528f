"""Exact maximum inner product search that reads the vectors where they are stored, block by block.

A head's queries and keys are searched in the run's own memory-mapped arrays
(:meth:`qkviz.store.run.StoredRun.vector_rows`): :data:`BLOCK_BYTES` of vectors at a time are decoded
to float32 (exactly as :meth:`~qkviz.store.run.StoredRun.keys` decodes them) and multiplied with the
queries, and a running top ``k`` is kept, so nothing the size of the head is copied, held or written.
One query against 100,000 32-dimensional MiniLM keys takes a few milliseconds (``bench/search.py``).

Scores are float32 dot products, as faiss computes them; the result is ordered by score, then by id.
Which of several vectors tied at the ``k``-th best score are returned is arbitrary (as with faiss).

:func:`tie_aware_recall` measures an approximate result against the exact one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

#: bytes of float32 vectors decoded and multiplied at a time (fits a core's cache with its scores)
BLOCK_BYTES = 1 << 19


@dataclass(frozen=True)
class MappedVectors:
    """``n`` vectors of ``dim`` float32 values, read on demand: ``read(rows)`` decodes ``rows`` (a slice
    or an int array of row numbers) to a float32 array ``[rows, dim]``."""

    read: Callable[[slice | np.ndarray], np.ndarray]
    n: int
    dim: int

    @classmethod
    def of_array(cls, array: np.ndarray) -> "MappedVectors":
        """The rows of an array (in memory or memory-mapped) ``[n, dim]``."""
        return cls(lambda rows: np.asarray(array[rows], dtype=np.float32), int(array.shape[0]), int(array.shape[1]))

    @classmethod
    def of_run(cls, run, side: str, layer: int, head: int) -> "MappedVectors":
        """The ``side`` (``"queries"`` or ``"keys"``) of query head ``(layer, head)`` in the run's memory-mapped arrays."""
        return cls(lambda rows: run.vector_rows(side, layer, head, rows), int(run.n_tokens), int(run.head_dim))

    @property
    def block_rows(self) -> int:
        return max(64, BLOCK_BYTES // (4 * max(self.dim, 1)))

    def blocks(self, block_rows: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, float32 [rows, dim])`` blocks covering every vector in order."""
        step = block_rows or self.block_rows
        for start in range(0, self.n, step):
            yield start, self.read(slice(start, min(start + step, self.n)))


def as_vectors(vectors: np.ndarray | MappedVectors) -> MappedVectors:
    return vectors if isinstance(vectors, MappedVectors) else MappedVectors.of_array(vectors)


def best_of(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best columns of each row of ``scores`` ``[m, c]`` and their ``ids``, in no order."""
    if scores.shape[1] <= k:
        return scores, ids
    chosen = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return np.take_along_axis(scores, chosen, axis=1), np.take_along_axis(ids, chosen, axis=1)


def ordered(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's columns by score (highest first), then id."""
    order = np.lexsort((ids, -scores), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


def exact_top_k(vectors: np.ndarray | MappedVectors, queries: np.ndarray, k: int, exclude: np.ndarray | None = None,
                block_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``(scores, ids)`` ``[n_queries, k']`` of the vectors with the highest dot product with
    each query, best first: float32 scores, int64 ids, ``k' = min(k, vectors not excluded)``.

    ``vectors``: an array ``[n, d]`` or :class:`MappedVectors` (read ``block_rows`` at a time);
    ``exclude``: bool ``[n]``, vectors never returned."""
    source = as_vectors(vectors)
    queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    if source.n == 0:
        raise ValueError("cannot search zero vectors")
    kept = source.n if exclude is None else source.n - int(np.count_nonzero(exclude))
    k = min(int(k), kept)
    m = len(queries)
    best_scores = np.empty((m, 0), dtype=np.float32)
    best_ids = np.empty((m, 0), dtype=np.int64)
    if k < 1:
        return best_scores, best_ids
    for start, block in source.blocks(block_rows):
        scores = queries @ block.T                                           # [m, rows] float32
        if exclude is not None:
            scores[:, exclude[start:start + len(block)]] = -np.inf
        ids = np.broadcast_to(np.arange(start, start + len(block), dtype=np.int64), scores.shape)
        best_scores, best_ids = best_of(np.concatenate([best_scores, scores], axis=1),
                                        np.concatenate([best_ids, ids], axis=1), k)
    return ordered(best_scores, best_ids)


def tie_aware_recall(approximate_ids: np.ndarray, vectors: np.ndarray | MappedVectors, queries: np.ndarray,
                     exact_scores: np.ndarray) -> float:
    """Mean share of the ``k`` returned ids (-1: none) whose true score reaches the exact ``k``-th best
    score (within float32 rounding): a vector tied with the ``k``-th best counts, since which of tied
    vectors a search returns is arbitrary."""
    source = as_vectors(vectors)
    k = exact_scores.shape[1]
    found = np.where(approximate_ids >= 0, approximate_ids, 0)
    unique, inverse = np.unique(found, return_inverse=True)
    rows = source.read(unique).astype(np.float64)[inverse.reshape(found.shape)]
    true_scores = np.einsum("qd,qkd->qk", np.atleast_2d(queries).astype(np.float64), rows)
    threshold = exact_scores[:, -1:].astype(np.float64)
    tolerance = 1e-5 * np.maximum(np.abs(threshold), 1.0)
    hits = (true_scores >= threshold - tolerance) & (approximate_ids >= 0)
    return float(hits.sum() / (k * len(exact_scores)))
