"""Top-k search: each row's ``k`` best columns, the one search below everything that searches.

By inner product (:func:`top_products`; :func:`top_logits` turns its scores into the model's logits with
:func:`qkviz.core.attention.dot_logits`), by cosine (:func:`nearest_cosine`: the inner product of unit rows), and
by Euclidean distance between layout points (:func:`nearest_euclidean`). The attention partners of the
attention-faithful layouts, of sampled layouts and of partner recall, and the exact partner search and the
recall measurement of the stored partner indexes (:mod:`qkviz.search`), all call these.

**Exact** search is faiss's exhaustive search (BLAS and a heap per row: 8x faster than numpy's partition of
every row of scores at 15,000 x 5,000 on one core). Columns in memory are searched in one call; columns read
where they are stored (:class:`MappedVectors`: a run's memory-mapped arrays) are searched :data:`BLOCK_BYTES`
of vectors at a time, decoded to float32 (exactly as :meth:`qkviz.store.run.StoredRun.keys` decodes them),
keeping a running top ``k``, so nothing the size of the head is copied, held or written. Scores are float32
dot products, best first (block by block, ties are ordered by id; in one call, as faiss's heap leaves them:
ordering 100,000 rows again would cost 0.14 s). Which of several columns tied at the ``k``-th best score are
returned is arbitrary.

**Approximate** search (``approximate=True``, at least :data:`APPROXIMATE_MIN` columns in memory) runs on an
inverted file: the inner-product search turned into a Euclidean one (each column gets one more coordinate,
``sqrt(M^2 - |c|^2)`` with ``M`` the largest column norm, each row a zero: then ``|r - c|^2 = |r|^2 + M^2 -
2 r . c``, so the nearest columns are the highest products), the columns cut into ``sqrt(n)`` k-means cells
and :data:`PROBES` cells searched per row; the scores of the columns found are then computed exactly.
On MiniLM heads at 100,000 tokens (every query against every key) it found 78-89% of the exact top 10 with
12 cells probed and 89-97% with 24, in 3-7 s against 30 s for the exact search; a plain inner-product
inverted file found 74-84% at 12 (``bench/scale.py``, ``docs/scale.md``). The partner indexes stored for
runs too large to search exactly are a different inverted file, tuned and kept on disk:
:mod:`qkviz.search.mips_index`. :func:`tie_aware_recall` measures an approximate result against the exact one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from qkviz.core.attention import dot_logits
from qkviz.core.logit_rule import LogitRule

#: bytes of float32 vectors read where they are stored and searched at a time (fits a core's cache with its scores)
BLOCK_BYTES = 1 << 19
#: fewer columns than this are always searched exactly (an inverted file of so few is no faster); the attention graph
#: asks for inverted files past its own ``exact_search`` tokens (:mod:`qkviz.projection.attention_graph`)
APPROXIMATE_MIN = 1_000
#: cells searched per row, of about ``sqrt(n)`` cells of ``n`` columns
PROBES = 12
#: k-means iterations of the cells (faiss's default is 25; 10 lose nothing measurable and train 2.5x faster)
CELL_ITERATIONS = 10
#: layout points' squared distances computed at once by :func:`nearest_euclidean` (rows x columns)
BLOCK_CELLS = 1 << 22


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


def top_products(rows: np.ndarray, columns: np.ndarray | MappedVectors, k: int, *, exclude: np.ndarray | None = None,
          approximate: bool = False, block_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, ids)`` ``[n_rows, k']``, best first: each row's ``k`` columns of highest dot product, float32
    scores and int64 ids, ``k' = min(k, columns not excluded)``.

    ``columns``: an array ``[n, d]`` (searched in one call) or :class:`MappedVectors` (read ``block_rows`` at a
    time); ``exclude``: bool ``[n]``, columns never returned; ``approximate``: an inverted file past
    :data:`APPROXIMATE_MIN` columns in memory (see the module docstring)."""
    import faiss

    rows = np.ascontiguousarray(np.atleast_2d(rows), dtype=np.float32)
    n_columns = columns.n if isinstance(columns, MappedVectors) else len(columns)
    if n_columns == 0:
        raise ValueError("cannot search zero vectors")
    kept = n_columns if exclude is None else n_columns - int(np.count_nonzero(exclude))
    k = min(int(k), kept)
    if k < 1:
        return np.empty((len(rows), 0), dtype=np.float32), np.empty((len(rows), 0), dtype=np.int64)
    if not isinstance(columns, MappedVectors) and exclude is None:
        columns = np.ascontiguousarray(columns, dtype=np.float32)
        if approximate and n_columns >= APPROXIMATE_MIN:
            found = _inverted_file_search(rows, columns, k)
            scores = np.einsum("rd,rkd->rk", rows, columns[found])
            order = np.argsort(-scores, axis=1, kind="stable")          # best first, by the exact products
            return np.take_along_axis(scores, order, axis=1), np.take_along_axis(found, order, axis=1)
        return faiss.knn(rows, columns, k, metric=faiss.METRIC_INNER_PRODUCT)   # best first (ties: faiss's order)
    best_scores = np.empty((len(rows), 0), dtype=np.float32)
    best_ids = np.empty((len(rows), 0), dtype=np.int64)
    for start, block in as_vectors(columns).blocks(block_rows):
        ids = np.arange(start, start + len(block), dtype=np.int64)
        if exclude is not None:
            ids = ids[~exclude[start:start + len(block)]]
            block = block[ids - start]
        if not len(ids):
            continue
        scores, found = faiss.knn(rows, np.ascontiguousarray(block, dtype=np.float32), min(k, len(ids)),
                                  metric=faiss.METRIC_INNER_PRODUCT)
        best_scores, best_ids = best_of(np.concatenate([best_scores, scores], axis=1),
                                        np.concatenate([best_ids, ids[found]], axis=1), k)
    return ordered(best_scores, best_ids)


def top_logits(rows: np.ndarray, columns: np.ndarray, k: int, rule: LogitRule, *, approximate: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """``(indices [n_rows, k] int64, logits [n_rows, k] float64)``: each row's ``k`` columns of highest
    content logit under ``rule`` (``scale * row . column``, soft-capped: :func:`qkviz.core.attention.dot_logits`
    without distances: rows and columns of any sentences, where no position term is defined), best first, by
    :func:`top_products` on one thread (a head is one core's work: two threads beside other work took 0.92 s, one 0.55 s)."""
    with faiss_threads(1):
        scores, found = top_products(rows, columns, k, approximate=approximate)
    return found, dot_logits(scores, rule)


def nearest_cosine(rows: np.ndarray, reference: np.ndarray, k: int, *, approximate: bool = False) -> np.ndarray:
    """int64 ``[n_rows, k]``: each row's ``k`` nearest ``reference`` points by cosine, nearest first."""
    with faiss_threads(1):
        return top_products(unit_rows(rows), unit_rows(reference), k, approximate=approximate)[1]


def unit_rows(points: np.ndarray) -> np.ndarray:
    points = np.asarray(points, dtype=np.float32)
    norms = np.linalg.norm(points, axis=1, keepdims=True)
    return points / np.where(norms > 0, norms, 1.0)


def nearest_euclidean(rows: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """int64 ``[n_rows, k]``: each row point's ``k`` nearest ``candidates`` (Euclidean, in float64: layout
    points, whose ``k``-th nearest decides partner recall), nearest first, in blocks of :data:`BLOCK_CELLS`."""
    rows = np.asarray(rows, dtype=np.float64)
    candidates = np.asarray(candidates, dtype=np.float64)
    k = min(k, len(candidates))
    squared = (candidates ** 2).sum(axis=1)
    ids = np.arange(len(candidates), dtype=np.int64)
    nearest = np.empty((len(rows), k), dtype=np.int64)
    step = max(1, BLOCK_CELLS // max(len(candidates), 1))
    for start in range(0, len(rows), step):
        closeness = 2 * rows[start:start + step] @ candidates.T - squared          # -|r - c|^2 + |r|^2
        nearest[start:start + len(closeness)] = ordered(*best_of(closeness, np.broadcast_to(ids, closeness.shape), k))[1]
    return nearest


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


@contextmanager
def faiss_threads(threads: int):
    """faiss's OpenMP threads set to ``threads`` inside the block, and given back after."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _inverted_file_search(rows: np.ndarray, columns: np.ndarray, k: int) -> np.ndarray:
    """int64 ``[n_rows, k]``: each row's ``k`` columns of (nearly) highest product, by a Euclidean inverted file
    of the augmented columns (see the module docstring; faiss's fixed k-means seed: the same cells every time).
    A row whose probed cells held fewer than ``k`` columns is searched exactly."""
    import faiss

    norms = np.linalg.norm(columns, axis=1)
    lift = np.sqrt(np.maximum(norms.max() ** 2 - norms ** 2, 0.0))
    lifted_columns = np.hstack([columns, lift[:, None]]).astype(np.float32)
    lifted_rows = np.hstack([rows, np.zeros((len(rows), 1), dtype=np.float32)])
    dim, cells = lifted_columns.shape[1], max(1, int(math.sqrt(len(columns))))
    index = faiss.IndexIVFFlat(faiss.IndexFlatL2(dim), dim, cells, faiss.METRIC_L2)
    index.cp.niter = CELL_ITERATIONS
    index.train(lifted_columns)
    index.add(lifted_columns)
    index.nprobe = min(PROBES, cells)
    found = index.search(lifted_rows, k)[1]
    short = np.flatnonzero((found < 0).any(axis=1))
    if len(short):
        found[short] = faiss.knn(rows[short], columns, k, metric=faiss.METRIC_INNER_PRODUCT)[1]
    return found
