"""Maximum inner product search over one head's vectors: exact, or an approximate inverted file past a limit.

Neither kind keeps a copy of the vectors. Up to :data:`EXACT_LIMIT` vectors the search is exact
(:func:`qkviz.neighbours.top_k.top_products`: every dot product, in float32, read block by block
from the run's memory-mapped arrays), and nothing is stored. Past it the index is an inverted file
that holds only its lists: ``4 * sqrt(n)`` centroids, trained by seeded k-means (faiss, inner-product
assignment) on up to 64 vectors a list, and each vector's row number sorted by list -- 4 bytes a
vector where a faiss ``IndexIVFFlat`` stores the vectors again. A search scores the centroids, then
reads from the run only the rows of the ``nprobe`` lists whose centroids score highest, so it may
miss partners. Its ``nprobe`` is tuned when it is built: doubled until the measured recall@10 on a
sample of the vectors that will query it reaches :data:`TARGET_RECALL`, and that recall is kept with
the index.

Recall@10 is tie-aware (:func:`~qkviz.neighbours.top_k.tie_aware_recall`), because attention ties
are common -- a decoder's queries score the hundreds of sentence-start tokens almost equally.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qkviz.neighbours.top_k import (MappedVectors, as_vectors, best_of, faiss_threads, ordered, tie_aware_recall,
                                    top_products)

logger = logging.getLogger(__name__)

#: vectors up to which search is exact (every vector scanned, nothing stored); an inverted file past it
EXACT_LIMIT = 500_000
#: recall@10 the approximate index's ``nprobe`` is tuned to reach
TARGET_RECALL = 0.95
#: held-out queries the recall is measured on
RECALL_SAMPLE = 500
RECALL_K = 10
#: k-means trains on at most this many vectors per list (faiss asks for 39 to 256)
TRAINING_PER_LIST = 64


@dataclass(frozen=True)
class IndexInfo:
    """What kind of search it is and how good: ``recall_at_10`` is 1.0 for exact search."""

    kind: str              # "exact" or "ivf"
    n_vectors: int
    dim: int
    nlist: int = 0
    nprobe: int = 0
    recall_at_10: float = 1.0
    build_seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return self.kind == "exact"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "n_vectors": self.n_vectors, "dim": self.dim, "nlist": self.nlist,
                "nprobe": self.nprobe, "recall_at_10": self.recall_at_10, "build_seconds": self.build_seconds}

    @classmethod
    def from_dict(cls, described: dict) -> "IndexInfo":
        return cls(**{name: described[name] for name in cls.__dataclass_fields__})


@dataclass
class ExactSearch:
    """Exact search over vectors read where they are stored; nothing of its own."""

    vectors: MappedVectors

    @property
    def info(self) -> IndexInfo:
        return IndexInfo("exact", self.vectors.n, self.vectors.dim)

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` ``[n_queries, k']``, best first, ``k' = min(k, vectors not excluded)``."""
        return top_products(queries, self.vectors, k, exclude=exclude)


@dataclass
class InvertedLists:
    """An inverted file over vectors read where they are stored: ``centroids`` float32 ``[nlist, d]``,
    ``rows`` int32/int64 ``[n]`` the vectors' row numbers grouped by list (ascending in each), list
    ``l`` holding ``rows[starts[l]:starts[l + 1]]``."""

    centroids: np.ndarray
    rows: np.ndarray
    starts: np.ndarray
    info: IndexInfo
    vectors: MappedVectors | None = None

    def attach(self, vectors: MappedVectors) -> "InvertedLists":
        self.vectors = vectors
        return self

    def with_nprobe(self, nprobe: int) -> "InvertedLists":
        info = IndexInfo(**{**self.info.as_dict(), "nprobe": int(nprobe)})
        return InvertedLists(self.centroids, self.rows, self.starts, info, self.vectors)

    def search(self, queries: np.ndarray, k: int, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` ``[n_queries, k]``, best first, from the ``nprobe`` lists whose centroids score
        highest with each query; fewer found than ``k`` are padded with id -1 and score -inf. Each probed
        list's vectors are read once for all the queries that probe it."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        m, k = len(queries), min(int(k), self.info.n_vectors)
        nlist = len(self.centroids)
        nprobe = min(max(self.info.nprobe, 1), nlist)
        centroid_scores = queries @ self.centroids.T                                     # [m, nlist]
        probed = (np.argpartition(-centroid_scores, nprobe - 1, axis=1)[:, :nprobe] if nprobe < nlist
                  else np.broadcast_to(np.arange(nlist), (m, nlist)))
        found_scores = np.full((m, nprobe, k), -np.inf, dtype=np.float32)
        found_ids = np.full((m, nprobe, k), -1, dtype=np.int64)
        pairs = np.argsort(probed.ravel(), kind="stable")                                 # (query, slot) by list
        lists = probed.ravel()[pairs]
        bounds = np.flatnonzero(np.diff(lists)) + 1
        for group in np.split(pairs, bounds):
            number = int(probed.ravel()[group[0]])
            rows = self.rows[self.starts[number]:self.starts[number + 1]]
            if exclude is not None:
                rows = rows[~exclude[rows]]
            if not len(rows):
                continue
            who, slot = np.divmod(group, nprobe)
            scores = queries[who] @ self.vectors.read(rows).T
            best_scores, best_rows = best_of(scores, np.broadcast_to(rows.astype(np.int64), scores.shape), k)
            found_scores[who, slot, :best_rows.shape[1]] = best_scores
            found_ids[who, slot, :best_rows.shape[1]] = best_rows
        scores, ids = best_of(found_scores.reshape(m, -1), found_ids.reshape(m, -1), k)
        return ordered(scores, ids)


#: k-means work (training vectors x lists) below which faiss trains on one thread: OpenMP's threads
#: spin for seconds on a machine whose cores are busy, for work of a fraction of a second on one core
SINGLE_THREAD_WORK = 10**9


def train_centroids(training: np.ndarray, nlist: int, seed: int) -> np.ndarray:
    """float32 ``[nlist, d]``: seeded k-means centroids of ``training``, vectors assigned by inner product."""
    import faiss

    clustering = faiss.Clustering(training.shape[1], nlist)
    clustering.seed = seed
    with faiss_threads(1 if len(training) * nlist < SINGLE_THREAD_WORK else faiss.omp_get_max_threads()):
        clustering.train(training, faiss.IndexFlatIP(training.shape[1]))
    return faiss.vector_to_array(clustering.centroids).reshape(nlist, training.shape[1]).astype(np.float32)


def build_inverted_lists(vectors: np.ndarray | MappedVectors, probe_queries: np.ndarray | None = None,
                         target_recall: float = TARGET_RECALL, seed: int = 0) -> InvertedLists:
    """An inverted file over ``vectors`` (``[n, d]``, read block by block) whose ``nprobe`` is tuned on
    ``probe_queries`` ``[m, d]`` (the vectors that will search it; a sample of ``vectors`` when None)."""
    started = time.perf_counter()
    source = as_vectors(vectors)
    n, dim = source.n, source.dim
    if n == 0:
        raise ValueError("cannot index zero vectors")
    rng = np.random.default_rng(seed)
    nlist = int(min(max(4 * np.sqrt(n), 1), n // 39 or 1))
    training_size = min(n, TRAINING_PER_LIST * nlist)
    training = source.read(np.sort(rng.choice(n, training_size, replace=False)) if training_size < n else slice(None))
    centroids = train_centroids(np.ascontiguousarray(training, dtype=np.float32), nlist, seed)
    assignment = np.empty(n, dtype=np.int64)
    for start, block in source.blocks():
        assignment[start:start + len(block)] = np.argmax(block @ centroids.T, axis=1)
    rows = np.argsort(assignment, kind="stable").astype(np.int32 if n < 2**31 else np.int64)
    starts = np.concatenate([[0], np.cumsum(np.bincount(assignment, minlength=nlist))]).astype(np.int64)
    if probe_queries is None or not len(probe_queries):
        probe_queries = source.read(np.sort(rng.choice(n, min(RECALL_SAMPLE, n), replace=False)))
    sample = np.ascontiguousarray(probe_queries[rng.choice(len(probe_queries), min(RECALL_SAMPLE, len(probe_queries)),
                                                           replace=False)], dtype=np.float32)
    k = min(RECALL_K, n)
    exact_scores, _ = top_products(sample, source, k)
    index = InvertedLists(centroids, rows, starts, IndexInfo("ivf", n, dim, nlist, 1), source)
    while True:
        recall = tie_aware_recall(index.search(sample, k)[1], source, sample, exact_scores)
        if recall >= target_recall or index.info.nprobe >= nlist:
            break
        index = index.with_nprobe(min(2 * index.info.nprobe, nlist))
    info = IndexInfo("ivf", n, dim, nlist, index.info.nprobe, recall, time.perf_counter() - started)
    logger.info("inverted-file index of %d vectors: %d lists, nprobe %d, recall@10 %.3f", n, nlist, info.nprobe, recall)
    return InvertedLists(centroids, rows, starts, info, source)


def write_inverted_lists(index: InvertedLists, path: Path) -> int:
    """Write the index's lists (not the vectors) to ``path`` through a temporary file; its size in bytes."""
    partial = Path(path).with_name(Path(path).name + ".partial")
    with open(partial, "wb") as file:
        np.savez(file, centroids=index.centroids, rows=index.rows, starts=index.starts)
    os.replace(partial, path)
    return Path(path).stat().st_size


def read_inverted_lists(path: Path, info: IndexInfo, vectors: MappedVectors) -> InvertedLists:
    """The lists at ``path`` over ``vectors``, searched with the ``nprobe`` of ``info``; ValueError when the
    file does not hold lists of ``info``'s shape."""
    with np.load(path, allow_pickle=False) as stored:
        centroids, rows, starts = stored["centroids"], stored["rows"], stored["starts"]
    if (centroids.shape != (info.nlist, info.dim) or rows.shape != (info.n_vectors,) or starts.shape != (info.nlist + 1,)
            or starts[-1] != info.n_vectors or info.n_vectors != vectors.n or info.dim != vectors.dim):
        raise ValueError(f"{path} does not hold an inverted file of {info.n_vectors} vectors of dimension {info.dim}")
    return InvertedLists(centroids, rows, starts, info, vectors)
