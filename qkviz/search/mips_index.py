"""Maximum inner product search over one set of vectors with faiss: exact, or approximate past a limit.

Up to :data:`EXACT_LIMIT` vectors the index is flat (``IndexFlatIP``): every search computes every
dot product, exactly, in float32 -- one query against a million 64-dimensional vectors takes about
15 ms on 2 cores. Past it the index is an inverted file (``IndexIVFFlat``, inner-product metric,
``4 * sqrt(n)`` lists trained by seeded k-means on up to 64 vectors a list): a search visits only the ``nprobe`` lists whose
centroids score highest, so it may miss partners. Its ``nprobe`` is tuned when it is built: doubled
until the measured recall@10 on a sample of the vectors that will query it reaches
:data:`TARGET_RECALL`, and that recall is kept with the index.

Recall@10 is tie-aware: a returned vector counts when its true score is at least the exact tenth
best score (within float32 rounding), because attention ties are common -- a decoder's queries
score the hundreds of sentence-start tokens almost equally -- and which of the tied vectors an
index returns is arbitrary.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:   # faiss is imported where an index is made or read, not by the status of a run
    import faiss

logger = logging.getLogger(__name__)

#: vectors up to which the index is exact (flat); an inverted file past it
EXACT_LIMIT = 1_000_000
#: recall@10 the approximate index's ``nprobe`` is tuned to reach
TARGET_RECALL = 0.95
#: held-out queries the recall is measured on
RECALL_SAMPLE = 500
RECALL_K = 10
#: k-means trains on at most this many vectors per list (faiss asks for 39 to 256)
TRAINING_PER_LIST = 64


@dataclass(frozen=True)
class IndexInfo:
    """What kind of index it is and how good: ``recall_at_10`` is 1.0 for an exact index."""

    kind: str              # "flat" or "ivf"
    n_vectors: int
    dim: int
    nlist: int = 0
    nprobe: int = 0
    recall_at_10: float = 1.0
    build_seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return self.kind == "flat"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "n_vectors": self.n_vectors, "dim": self.dim, "nlist": self.nlist,
                "nprobe": self.nprobe, "recall_at_10": self.recall_at_10, "build_seconds": self.build_seconds}

    @classmethod
    def from_dict(cls, described: dict) -> "IndexInfo":
        return cls(**{name: described[name] for name in cls.__dataclass_fields__})


@dataclass
class MipsIndex:
    """A faiss index and its :class:`IndexInfo`."""

    index: faiss.Index
    info: IndexInfo

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)`` ``[n_queries, k']`` with ``k' = min(k, n_vectors)``, best first (scores are
        float32 dot products; an approximate index may return fewer, padded with id -1)."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        k = min(int(k), self.info.n_vectors)
        scores, found = self.index.search(queries, k)
        return scores, found.astype(np.int64)


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``(scores, ids)`` of :meth:`MipsIndex.search`, by a flat faiss index (no copy kept)."""

    return build_index(vectors, exact_limit=len(vectors)).search(queries, k)


def tie_aware_recall(approximate_ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray,
                     exact_scores: np.ndarray) -> float:
    """Mean share of the ``k`` returned ids whose true score reaches the exact ``k``-th best score."""
    k = exact_scores.shape[1]
    found = np.where(approximate_ids >= 0, approximate_ids, 0)
    true_scores = np.einsum("qd,qkd->qk", queries.astype(np.float64), vectors[found].astype(np.float64))
    threshold = exact_scores[:, -1:].astype(np.float64)
    tolerance = 1e-5 * np.maximum(np.abs(threshold), 1.0)
    hits = (true_scores >= threshold - tolerance) & (approximate_ids >= 0)
    return float(hits.sum() / (k * len(queries)))


def build_index(vectors: np.ndarray, probe_queries: np.ndarray | None = None, exact_limit: int = EXACT_LIMIT,
                target_recall: float = TARGET_RECALL, seed: int = 0) -> MipsIndex:
    """An inner-product index over ``vectors`` ``[n, d]`` (float32): flat up to ``exact_limit`` vectors,
    else an inverted file whose ``nprobe`` is tuned on ``probe_queries`` ``[m, d]`` (the vectors that
    will search it; a sample of ``vectors`` when None)."""
    import faiss

    started = time.perf_counter()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    if n == 0:
        raise ValueError("cannot index zero vectors")
    if n <= exact_limit:
        index = faiss.IndexFlatIP(dim)
        index.add(vectors)
        return MipsIndex(index, IndexInfo("flat", n, dim, build_seconds=time.perf_counter() - started))
    rng = np.random.default_rng(seed)
    nlist = int(min(max(4 * np.sqrt(n), 1), n // 39 or 1))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    training_size = TRAINING_PER_LIST * nlist
    training = vectors if n <= training_size else vectors[np.sort(rng.choice(n, training_size, replace=False))]
    index.train(training)
    index.add(vectors)
    if probe_queries is None or not len(probe_queries):
        probe_queries = vectors
    sample = np.ascontiguousarray(probe_queries[rng.choice(len(probe_queries), min(RECALL_SAMPLE, len(probe_queries)),
                                                           replace=False)], dtype=np.float32)
    k = min(RECALL_K, n)
    exact_scores, _ = exact_top_k(vectors, sample, k)
    nprobe, recall = 1, 0.0
    while True:
        index.nprobe = nprobe
        recall = tie_aware_recall(index.search(sample, k)[1], vectors, sample, exact_scores)
        if recall >= target_recall or nprobe >= nlist:
            break
        nprobe = min(2 * nprobe, nlist)
    info = IndexInfo("ivf", n, dim, nlist, nprobe, recall, time.perf_counter() - started)
    logger.info("inverted-file index of %d vectors: %d lists, nprobe %d, recall@10 %.3f", n, nlist, nprobe, recall)
    return MipsIndex(index, info)


def write_index(index: MipsIndex, path: Path) -> int:
    """Write the faiss index to ``path`` through a temporary file; returns its size in bytes."""
    import faiss

    partial = Path(path).with_name(Path(path).name + ".partial")
    faiss.write_index(index.index, str(partial))
    os.replace(partial, path)
    return Path(path).stat().st_size


def read_index(path: Path, info: IndexInfo) -> MipsIndex:
    """The index at ``path``, memory-mapped (read-only), its search settings restored from ``info``."""
    import faiss

    index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    if info.kind == "ivf":
        faiss.extract_index_ivf(index).nprobe = info.nprobe
    return MipsIndex(index, info)
