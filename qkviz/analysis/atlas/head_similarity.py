"""Related heads: how alike every pair of heads is, in what they attend to and in their query/key geometry.

Over one seeded sample of queries, the same for every head (:mod:`qkviz.analysis.atlas.related_sample`):

* ``js_distance[a, b]`` (Clark et al. 2019, "What does BERT look at?"): the mean over the sampled
  queries of the Jensen-Shannon distance between head ``a``'s and head ``b``'s attention of that query
  over its sentence's keys, ``sqrt(JS(P, Q))`` with ``JS(P, Q) = H(M) - (H(P) + H(Q)) / 2``,
  ``M = (P + Q) / 2`` and base-2 entropies, so it lies in [0, 1] (0: the same distribution). The
  keys a query may see under the causal mask (every key of its sentence in an encoder) form its
  distribution's support for every head, always in full; a layer's sliding window gives the keys
  outside it weight 0 there.
* ``geometry_similarity[a, b]``: linear CKA (Kornblith et al. 2019) between the heads' aligned joint
  clouds (:func:`qkviz.core.alignment.align_head` with the default alignment over the whole head: keys
  translated, norms scaled -- the geometry the projections show), rows = the sampled queries' query
  vectors, then the same tokens' key vectors, each cloud centred:
  ``CKA(X, Y) = |Y^T X|_F^2 / (|X^T X|_F |Y^T Y|_F)`` in [0, 1], 1 for a head with itself (and for
  clouds that differ by a rotation and a uniform scale).
* ``order``: the leaf order of average-linkage hierarchical clustering on ``js_distance`` (scipy,
  optimal leaf ordering), for ordering the matrix view.
* ``map_xy``: a 2D map of the heads from ``js_distance`` by classical (Torgerson) MDS: the top two
  eigenvectors of the double-centred squared distances. It has no random start and no local minima
  (SMACOF, scikit-learn's MDS, gives a different layout per seed), so the map of a run never changes;
  each axis's sign is fixed so that its largest coordinate is positive.

The sample (:mod:`qkviz.analysis.atlas.related_sample`): whole sentences in a seeded random order until they
hold ``max_queries`` query tokens; past a budget of query-key pairs for the run's head count (long
documents), queries one by one, each with its whole support. The result records the pairs, the budget
and whether queries were sampled.

Heads are numbered flat everywhere: ``layer * n_heads + head``. The JS distance holds every head's
attention on the sample at once (``8 * heads * pairs`` bytes, at most the sample's budget; about
50 MB for 270 heads at 2,000 queries of 20-token sentences), recomputed per query over its support in
padded blocks sorted by support size (:func:`qkviz.core.attention.attention_logits` and
``masked_softmax``), and computes per-head entropies a few heads at a time, then ``H(M)`` of one head
against all later heads in chunks of :data:`CHUNK_CELLS`. CKA holds the clouds (``8 * heads * d_head``
bytes a sampled query, at most :data:`CLOUD_BYTES`: beyond it a seeded subset of the sampled queries)
and takes one matrix product per layer against the later heads, in column chunks of
:data:`PRODUCT_CELLS`. Stored in ``<run>/related/`` as plain ``.npy`` and ``related.json``, written last
(see :func:`store_head_similarity`).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from qkviz.store import files as run_files
from qkviz.core.alignment import align_head
from qkviz.analysis.atlas.related_sample import block_attention, query_blocks, sample_queries, sentence_pairs
from qkviz.cluster import check_jobs, usable_cores
from qkviz.core.errors import QkvizError
from qkviz.store.artifacts import ArtifactDirectory
from qkviz.store.run import StoredRun, as_run

logger = logging.getLogger(__name__)

SIMILARITY_SCHEMA_VERSION = 1
BY = ("attention", "geometry")
#: bytes of the CKA clouds (float32 ``[2 * queries, heads * d_head]``)
CLOUD_BYTES = 1_000_000_000
#: cells of ``M`` computed at once in the JS distance (heads x pairs)
CHUNK_CELLS = 1 << 20
#: cells of one CKA matrix product (``d_head`` rows of a layer's heads x columns of later heads)
PRODUCT_CELLS = 1 << 24
_TINY = np.finfo(np.float64).tiny


@dataclass
class HeadSimilarity:
    """Every pair of heads compared over one sample of queries (flat head index ``layer * n_heads + head``)."""

    n_layers: int
    n_heads: int
    js_distance: np.ndarray           # float64 [head, head], in [0, 1], 0 on the diagonal
    geometry_similarity: np.ndarray   # float64 [head, head], linear CKA in [0, 1], 1 on the diagonal
    order: np.ndarray                 # int64 [head]: leaf order of average-linkage clustering on js_distance
    map_xy: np.ndarray                # float64 [head, 2]: classical MDS of js_distance
    sentences: np.ndarray             # int64 [sentence]: the sentences of the sampled queries, sorted
    n_queries: int                    # sampled queries (the JS distance's mean is over them)
    max_queries: int
    seed: int
    seconds: float
    n_pairs: int = 0                  # query-key pairs of the sampled queries' supports
    max_pairs: int | None = None      # the pair budget in force (None: a result of an older qkviz)
    subsampled: bool = False          # queries sampled one by one (True) or whole sentences (False)
    n_geometry_tokens: int = 0        # tokens of the CKA clouds: the sampled queries, or a subset of them

    def flat(self, layer: int, head: int) -> int:
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise QkvizError(f"layer {layer} head {head} is out of range "
                             f"({self.n_layers} layers x {self.n_heads} heads)")
        return layer * self.n_heads + head

    def head_of(self, flat: int) -> tuple[int, int]:
        return int(flat) // self.n_heads, int(flat) % self.n_heads


@dataclass(frozen=True)
class RelatedHead:
    layer: int
    head: int
    value: float   # JS distance (by attention) or CKA (by geometry)


# -- computing ------------------------------------------------------------------------------------
def relate_heads(run: StoredRun | str | Path, *, max_queries: int = 2000, seed: int = 0,
                 progress: bool = True, jobs: int | None = None) -> HeadSimilarity:
    """Compare every pair of heads and store the result in ``<run>/related/`` (what ``qkviz related`` does).

    Over one seeded sample of queries (whole sentences, or queries one by one under a budget of
    query-key pairs when sentences are long): the mean Jensen-Shannon distance between two heads'
    attention distributions of the same queries, and linear CKA between their aligned query/key
    clouds; with a clustering order and a 2D map of the heads.

    Parameters
    ----------
    run
        A run, or the path of one.
    max_queries
        Whole sentences are sampled until they hold this many query tokens (at most this many queries
        when queries are sampled one by one).
    seed
        Seed of the sample.
    progress
        Show progress bars.
    jobs
        Threads that read the heads and compare them (numpy releases the interpreter lock). Default: the cores this
        process may use; ``1``: one. The result is the same whichever number ran it.

    Returns
    -------
    HeadSimilarity
        The comparison, as :meth:`qkviz.Run.related` reads it back.
    """
    run = as_run(run)
    similarity = compute_head_similarity(run, max_queries, seed, progress=progress, jobs=jobs)
    directory = store_head_similarity(run, similarity)
    closest = closest_across_layers(similarity)
    pair = (f"; closest heads in different layers: L{closest[0][0]} H{closest[0][1]} and "
            f"L{closest[1][0]} H{closest[1][1]} (JS distance {closest[2]:.3f})" if closest else "")
    sampled = (f"queries sampled one by one under a budget of {similarity.max_pairs:,} pairs"
               if similarity.subsampled else "whole sentences")
    geometry = ("" if similarity.n_geometry_tokens == similarity.n_queries
                else f"; CKA over {similarity.n_geometry_tokens:,} of them")
    logger.info("%s: %d heads over %d queries (%d sentences, %s; %s query-key pairs%s) in %.1f s%s", directory,
                run.n_layers * run.n_heads, similarity.n_queries, len(similarity.sentences), sampled,
                f"{similarity.n_pairs:,}", geometry, similarity.seconds, pair)
    return similarity


def compute_head_similarity(run: StoredRun, max_queries: int = 2000, seed: int = 0, progress: bool = False,
                            max_pairs: int | None = None, jobs: int | None = None) -> HeadSimilarity:
    """Every pair of heads' JS distance and CKA over :func:`sample_queries` (``max_pairs``: the pair
    budget, default :func:`~qkviz.analysis.atlas.related_sample.pair_budget` of the run's heads), on ``jobs``
    threads (default: the cores this process may use)."""
    from tqdm.auto import tqdm

    if max_queries < 1:
        raise QkvizError(f"max_queries must be at least 1, got {max_queries}")
    check_jobs(jobs, None)
    threads = usable_cores() if jobs is None else jobs
    started = time.perf_counter()
    n_total, width = run.n_layers * run.n_heads, run.head_dim
    sample = sample_queries(run, max_queries, seed, max_pairs)
    blocks = query_blocks(run, sample.tokens)
    sizes = np.concatenate([block.support.sum(axis=1) for block in blocks])          # [query], in block order
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)   # each query's first pair
    geometry_tokens = geometry_sample(sample.tokens, n_total * width, seed)
    attention = np.empty((n_total, sample.n_pairs))
    clouds = np.empty((2 * len(geometry_tokens), n_total * width), dtype=np.float32)

    def read(flat: int) -> None:
        layer, head = divmod(flat, run.n_heads)
        queries, keys = run.queries(layer, head), run.keys(layer, head)
        attention[flat] = np.concatenate([block_attention(run, layer, head, block, queries, keys)[block.support]
                                          for block in blocks])
        clouds[:, flat * width:(flat + 1) * width] = centred_cloud(queries, keys, geometry_tokens)

    bars = dict(unit="head", disable=not progress, dynamic_ncols=True)
    read(0)   # opens the run's arrays and tables before threads share them
    with ThreadPoolExecutor(threads) as pool, tqdm(total=n_total, desc="reading heads", **bars) as bar:
        bar.update()
        for _ in pool.map(read, range(1, n_total)):
            bar.update()
    # heads with a sink logit (gpt-oss): what each query's row lacks of 1 is the sink's share, one more outcome
    has_sinks = any(run.sink(layer, head) is not None for layer in range(run.n_layers) for head in range(run.n_heads))
    shares = np.clip(1.0 - np.add.reduceat(attention, starts, axis=1), 0.0, 1.0) if has_sinks else None
    with tqdm(total=n_total, desc="attention distance", **bars) as bar:
        js = mean_js_distance(attention, starts, bar.update, shares, threads)
    attention = None   # frees the attention matrix before the CKA needs its memory
    with tqdm(total=n_total, desc="geometry (CKA)", **bars) as bar:
        cka = linear_cka(clouds, width, run.n_heads, bar.update)
    return HeadSimilarity(run.n_layers, run.n_heads, js, cka, cluster_order(js), classical_mds(js), sample.sentences,
                          len(sample.tokens), max_queries, seed, time.perf_counter() - started, sample.n_pairs,
                          sample.max_pairs, sample.subsampled, len(geometry_tokens))


def geometry_sample(tokens: np.ndarray, columns: int, seed: int) -> np.ndarray:
    """The CKA clouds' tokens: ``tokens`` (the sampled queries), or a seeded subset of them when their
    clouds (``2 * 4 * columns`` bytes a token) would pass :data:`CLOUD_BYTES`."""
    limit = max(2, CLOUD_BYTES // (8 * max(columns, 1)))
    if len(tokens) <= limit:
        return tokens
    return np.sort(np.random.default_rng(seed).choice(tokens, size=limit, replace=False))


def centred_cloud(queries: np.ndarray, keys: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """float32 ``[2 * len(tokens), d_head]``: the head's aligned queries, then keys, of ``tokens``, centred."""
    aligned = align_head(queries, keys)
    cloud = np.concatenate([aligned.queries[tokens], aligned.keys[tokens]]).astype(np.float64)
    return (cloud - cloud.mean(axis=0)).astype(np.float32)


def plogp_sums(probs: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``[..., query]``: ``sum p log2 p`` over each query's keys (0 log 0 = 0)."""
    terms = np.maximum(probs, _TINY)
    np.log2(terms, out=terms)
    terms *= probs
    return np.add.reduceat(terms, starts, axis=-1)


def plogp(probs: np.ndarray) -> np.ndarray:
    """``p log2 p`` elementwise (0 log 0 = 0)."""
    return probs * np.log2(np.maximum(probs, _TINY))


def mean_js_distance(attention: np.ndarray, starts: np.ndarray, advance: Callable[[int], object] | None = None,
                     shares: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    """float64 ``[head, head]``: mean over queries of ``sqrt(H(M) - (H(P) + H(Q)) / 2)`` (base 2).

    ``attention`` ``[head, pair]``: each head's probabilities over the same flat pairs, a query's keys contiguous
    from ``starts[query]``; ``shares`` ``[head, query]``: where heads have sink logits, each query's share of no key
    (its row's lack of 1), one more outcome of its distribution. Per-head entropies are computed once, a few heads
    at a time; each head is then compared with every later head, ``M`` in chunks of :data:`CHUNK_CELLS`, heads
    spread over ``threads`` threads (default: the cores this process may use). Temporaries stay within a few
    chunks: nothing as large as ``attention`` is allocated."""
    n_heads, n_pairs = attention.shape
    chunk = max(1, CHUNK_CELLS // max(n_pairs, 1))
    entropy = np.concatenate([-plogp_sums(attention[first:first + chunk], starts)      # [head, query]
                              for first in range(0, n_heads, chunk)])
    if shares is not None:
        entropy -= plogp(shares)
    distance = np.zeros((n_heads, n_heads))

    def compare(a: int) -> None:
        for first in range(a + 1, n_heads, chunk):
            others = slice(first, min(first + chunk, n_heads))
            mixture = np.add(attention[others], attention[a])
            mixture *= 0.5
            divergence = -plogp_sums(mixture, starts) - (entropy[others] + entropy[a]) * 0.5
            if shares is not None:
                divergence -= plogp((shares[others] + shares[a]) * 0.5)
            distance[a, others] = np.sqrt(np.maximum(divergence, 0.0)).mean(axis=1)

    with ThreadPoolExecutor(threads or usable_cores()) as pool:
        for _ in pool.map(compare, range(n_heads)):
            if advance is not None:
                advance(1)
    return distance + distance.T


def linear_cka(clouds: np.ndarray, width: int, block: int,
               advance: Callable[[int], object] | None = None) -> np.ndarray:
    """float64 ``[head, head]``: linear CKA between heads whose centred clouds are the column blocks of
    ``clouds`` ``[row, head * width]``; ``|Y^T X|_F^2`` for ``block`` heads at a time (a layer) against
    every later head, from matrix products of at most :data:`PRODUCT_CELLS` cells."""
    n_heads = clouds.shape[1] // width
    cross = np.zeros((n_heads, n_heads))
    for first in range(0, n_heads, block):
        count = min(block, n_heads - first)
        rows = clouds[:, first * width:(first + count) * width].T
        step = max(1, PRODUCT_CELLS // (count * width * width))
        for other in range(first, n_heads, step):
            stop = min(other + step, n_heads)
            products = rows @ clouds[:, other * width:stop * width]
            squares = np.square(products, dtype=np.float64).reshape(count, width, stop - other, width)
            cross[first:first + count, other:stop] = squares.sum(axis=(1, 3))
        if advance is not None:
            advance(count)
    cross = np.triu(cross) + np.triu(cross, 1).T
    norms = np.sqrt(np.diag(cross))                                        # |X^T X|_F per head
    with np.errstate(divide="ignore", invalid="ignore"):
        cka = cross / np.outer(norms, norms)
    cka = np.clip(np.nan_to_num(cka, nan=0.0, posinf=0.0), 0.0, 1.0)
    np.fill_diagonal(cka, 1.0)
    return cka


def cluster_order(distance: np.ndarray) -> np.ndarray:
    """int64 ``[head]``: the leaves of average-linkage clustering on ``distance``, optimally ordered."""
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import squareform

    if len(distance) < 3:
        return np.arange(len(distance), dtype=np.int64)
    condensed = squareform(np.maximum(distance, 0.0), checks=False)
    return leaves_list(linkage(condensed, method="average", optimal_ordering=True)).astype(np.int64)


def classical_mds(distance: np.ndarray, dim: int = 2) -> np.ndarray:
    """float64 ``[head, dim]``: classical MDS of ``distance``, each axis's largest coordinate positive."""
    count = len(distance)
    centring = np.eye(count) - 1.0 / count
    inner = -0.5 * centring @ np.square(distance) @ centring
    values, vectors = np.linalg.eigh((inner + inner.T) / 2)
    top = np.argsort(values)[::-1][:dim]
    coordinates = np.zeros((count, dim))
    coordinates[:, :len(top)] = vectors[:, top] * np.sqrt(np.maximum(values[top], 0.0))
    largest = coordinates[np.argmax(np.abs(coordinates), axis=0), np.arange(dim)]
    return coordinates * np.where(largest < 0, -1.0, 1.0)


# -- reading ----------------------------------------------------------------------------------------
def related_heads(similarity: HeadSimilarity, layer: int, head: int, k: int = 5,
                  by: str = "attention") -> list[RelatedHead]:
    """The ``k`` heads nearest ``(layer, head)``: by attention, smallest JS distance first; by geometry,
    largest CKA first; the head itself left out (ties in flat head order)."""
    if by not in BY:
        raise ValueError(f"by must be one of {BY}, got {by!r}")
    flat = similarity.flat(layer, head)
    values = (similarity.js_distance if by == "attention" else similarity.geometry_similarity)[flat]
    ranked = np.argsort(values if by == "attention" else -values, kind="stable")
    ranked = ranked[ranked != flat][:max(k, 0)]
    return [RelatedHead(*similarity.head_of(other), float(values[other])) for other in ranked]


def closest_across_layers(similarity: HeadSimilarity) -> tuple[tuple[int, int], tuple[int, int], float] | None:
    """The two heads of different layers with the smallest JS distance, and it (None with one layer)."""
    layer = np.arange(len(similarity.js_distance)) // similarity.n_heads
    masked = np.where(layer[:, None] != layer[None, :], similarity.js_distance, np.inf)
    a, b = np.unravel_index(np.argmin(masked), masked.shape)
    if not np.isfinite(masked[a, b]):
        return None
    return similarity.head_of(min(a, b)), similarity.head_of(max(a, b)), float(masked[a, b])


# -- storing ------------------------------------------------------------------------------------------
def _related_directory(run: StoredRun) -> ArtifactDirectory:
    return ArtifactDirectory(run, run_files.RELATED_DIRECTORY, run_files.RELATED_MARKER, SIMILARITY_SCHEMA_VERSION,
                             "qkviz related")


_ARRAYS = (run_files.RELATED_JS_DISTANCE, run_files.RELATED_GEOMETRY, run_files.RELATED_ORDER, run_files.RELATED_MAP_XY,
           run_files.RELATED_SENTENCES)


def store_head_similarity(run: StoredRun, similarity: HeadSimilarity) -> Path:
    """Write ``similarity`` into ``<run>/related/``: the arrays first, ``related.json`` last."""
    arrays = (similarity.js_distance, similarity.geometry_similarity, similarity.order, similarity.map_xy,
              similarity.sentences)
    return _related_directory(run).write(
        arrays=dict(zip(_ARRAYS, arrays)), tables={},
        marker={"n_layers": similarity.n_layers, "n_heads": similarity.n_heads, "max_queries": similarity.max_queries,
                "seed": similarity.seed, "n_queries": similarity.n_queries, "n_pairs": similarity.n_pairs,
                "max_pairs": similarity.max_pairs, "queries_subsampled": similarity.subsampled,
                "n_geometry_tokens": similarity.n_geometry_tokens, "seconds": similarity.seconds,
                "alignment": {"translate_keys": True, "scale_norms": True}})


def load_head_similarity(run: StoredRun) -> HeadSimilarity | None:
    """The run's stored head similarity, or None: absent, half-written (no marker), or made by another
    qkviz version or extraction (then with a warning naming the command that makes it again)."""
    stored = _related_directory(run)
    marker = stored.read_marker()
    if marker is None:
        return None
    n_total = run.n_layers * run.n_heads
    try:
        js, cka, order, map_xy, sentences = (stored.array(name) for name in _ARRAYS)
        if js.shape != (n_total, n_total) or cka.shape != js.shape or order.shape != (n_total,) \
                or map_xy.shape != (n_total, 2):
            raise ValueError(f"arrays of shape {js.shape}, {cka.shape}, {order.shape}, {map_xy.shape} "
                             f"for {n_total} heads")
        sentences = sentences.astype(np.int64)
        n_queries = int(marker["n_queries"])
        if "n_pairs" in marker:
            n_pairs, max_pairs = int(marker["n_pairs"]), int(marker["max_pairs"])
            subsampled, n_geometry_tokens = bool(marker["queries_subsampled"]), int(marker["n_geometry_tokens"])
        else:   # an older qkviz's result: whole sentences, every token a query and in the clouds
            n_pairs, max_pairs, subsampled, n_geometry_tokens = sentence_pairs(run, sentences), None, False, n_queries
        return HeadSimilarity(run.n_layers, run.n_heads, js, cka, order.astype(np.int64), map_xy, sentences,
                              n_queries, int(marker["max_queries"]), int(marker["seed"]), float(marker["seconds"]),
                              n_pairs, max_pairs, subsampled, n_geometry_tokens)
    except (OSError, ValueError, KeyError, TypeError) as error:
        stored.warn_damaged(error)
        return None
