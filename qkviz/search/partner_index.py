"""Attention partners across the whole corpus: the keys a query scores highest, the queries a key draws most.

Inside a sentence a head's attention is ``softmax(scale * q . k)``; across the corpus the same
score ranks every key any query could meet. For a query of head ``(layer, head)`` its partners
are the ``k`` keys (of any sentence) with the highest ``scale * q . k``; for a key, the ``k``
queries with the highest score on it. The scores are the model's own logits (soft-capped where
the model caps) of the stored vectors, so a partner in another sentence is scored as if both
tokens stood where they stood in their own sentences (with rotary positions, at that offset).

Each head's partner search is a maximum inner product search (:mod:`qkviz.search.mips_index`) over one
side: ``keys`` of a key-value head (shared by the query heads of its group) and ``queries`` of a
query head. Up to ``exact_limit`` tokens it is exact and reads the run's memory-mapped arrays
block by block: there is no index, nothing to build, nothing stored. Past it ``qkviz index`` builds
an inverted file per side into ``<run>/indexes/`` -- ``<side>-l<L>-h<H>.ivf.npz`` (its lists: row
numbers, not vectors) and its JSON sidecar, written last, so only complete indexes are read; a
missing one is a :class:`QkvizError` naming the command. Index files of an older qkviz (faiss
``.faiss`` files, sidecar schema 1, which copied the vectors) are never read, and ``qkviz index``
deletes them.

How much of this neighbourhood a 2D layout keeps is :func:`layout_overlap`: of the ``k`` true
partners, how many are among the ``k`` points of the other kind nearest in the layout.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qkviz.store import files as run_files
from qkviz.core.attention import dot_logits
from qkviz.core.errors import QkvizError
from qkviz.neighbours.partner_recall import partner_recall
from qkviz.neighbours.top_k import MappedVectors
from qkviz.search.mips_index import (EXACT_LIMIT, RECALL_SAMPLE, ExactSearch, IndexInfo, InvertedLists,
                                     build_inverted_lists, read_inverted_lists, write_inverted_lists)

logger = logging.getLogger(__name__)

PARTNER_INDEX_SCHEMA_VERSION = 2
#: index files of qkviz before schema 2 (faiss indexes holding a copy of the vectors)
LEGACY_INDEX_SUFFIX = ".faiss"
SIDES = ("keys", "queries")
#: indexes kept open at once per run (each a memory map)
OPEN_INDEXES = 32


@dataclass(frozen=True)
class IndexTarget:
    """One index: ``side`` ``"keys"`` of key-value head ``head``, or ``"queries"`` of query head ``head``."""

    side: str
    layer: int
    head: int

    @property
    def stem(self) -> str:
        return f"{self.side}-l{self.layer}-h{self.head}"


def index_targets(run, layers: list[int], heads: list[int]) -> list[IndexTarget]:
    """The indexes the partner searches of ``heads`` in ``layers`` need: their key-value heads' keys, their queries."""
    kv_heads = sorted({run.kv_head(head) for head in heads})
    return [IndexTarget(side, layer, head) for layer in layers
            for side, chosen in (("keys", kv_heads), ("queries", heads)) for head in chosen]


@dataclass(frozen=True)
class Partners:
    """The corpus-wide partners of one clicked point of head ``(layer, head)``.

    ``point`` indexes the head's joint layout (query ``t`` is ``t``, key ``t`` is ``n_tokens + t``);
    ``tokens`` int64 ``[k]`` are the partners' tokens, best first, and ``points`` their joint-layout
    indices (keys after queries); ``logits`` float64 ``[k]`` their ``scale * q . k``."""

    layer: int
    head: int
    point: int
    tokens: np.ndarray
    points: np.ndarray
    logits: np.ndarray
    info: IndexInfo
    requested_k: int

    @property
    def clicked_side(self) -> str:
        return "query" if self.point < self.info.n_vectors else "key"

    @property
    def partner_side(self) -> str:
        return "key" if self.clicked_side == "query" else "query"

    @property
    def k(self) -> int:
        return int(len(self.tokens))


class PartnerIndexes:
    """The partner searches of one run: exact on the run's arrays up to ``exact_limit`` tokens, else the
    inverted files ``qkviz index`` stored in ``<run>/indexes/``."""

    def __init__(self, run, exact_limit: int = EXACT_LIMIT):
        self.run = run
        self.exact_limit = exact_limit
        self.directory = Path(run.path) / run_files.INDEX_DIRECTORY
        self._open: OrderedDict[IndexTarget, ExactSearch | InvertedLists] = OrderedDict()

    # -- files ------------------------------------------------------------------------------
    def paths(self, target: IndexTarget) -> tuple[Path, Path]:
        index_file, sidecar = run_files.partner_index_files(target.stem)
        return self.directory / index_file, self.directory / sidecar

    def stored_info(self, target: IndexTarget) -> IndexInfo | None:
        """The stored index's :class:`IndexInfo`, or None unless a complete index of this run (and of this
        qkviz's format) is on disk."""
        index_path, sidecar_path = self.paths(target)
        try:
            sidecar = json.loads(sidecar_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(sidecar, dict) or sidecar.get("schema") != PARTNER_INDEX_SCHEMA_VERSION:
            logger.warning("partner index %s is from an older qkviz and is not used; 'qkviz index --run %s' replaces "
                           "it", sidecar_path.name, self.run.path)
            return None
        try:
            size = index_path.stat().st_size
        except OSError:
            return None
        if (sidecar.get("run") != self.run.manifest["fingerprint"] or sidecar.get("bytes") != size
                or not isinstance(sidecar.get("sha256"), str) or not run_files.matches_checksum(index_path, sidecar["sha256"])):
            logger.warning("partner index %s is stale or damaged and is not used (exact search is used in its place "
                           "where the run is small enough); build it again with 'qkviz index --run %s'", index_path.name,
                           self.run.path)
            return None
        return IndexInfo.from_dict(sidecar["info"])

    def summary(self) -> dict[str, int]:
        """``{kind: number of stored indexes}`` over this run's complete indexes (``"ivf"``)."""
        counts: dict[str, int] = {}
        for sidecar_path in sorted(self.directory.glob("*.json")) if self.directory.exists() else []:
            side, layer, head = sidecar_path.stem.split("-") if sidecar_path.stem.count("-") == 2 else ("", "", "")
            if side in SIDES and layer[1:].isdigit() and head[1:].isdigit():
                info = self.stored_info(IndexTarget(side, int(layer[1:]), int(head[1:])))
                if info is not None:
                    counts[info.kind] = counts.get(info.kind, 0) + 1
        return counts

    def mapped(self, target: IndexTarget) -> MappedVectors:
        """The vectors the target searches, read from the run's memory-mapped arrays."""
        return MappedVectors.of_run(self.run, target.side, target.layer, self.query_head(target))

    def query_head(self, target: IndexTarget) -> int:
        """A query head whose vectors of ``target.side`` are the target's (a key-value head's first query head)."""
        return target.head * (self.run.n_heads // self.run.n_kv_heads) if target.side == "keys" else target.head

    def vectors(self, target: IndexTarget) -> np.ndarray:
        """float32 ``[token, d_head]``: the vectors the target searches, decoded whole (for measurements)."""
        return self.mapped(target).read(slice(None))

    def probe_queries(self, target: IndexTarget, seed: int = 0) -> np.ndarray:
        """float32 ``[m, d_head]``: a seeded sample of up to :data:`RECALL_SAMPLE` of the vectors that will
        search the target (its opposite side: a key-value head's group's queries, a query head's keys)."""
        run = self.run
        if target.side == "keys":
            group = run.n_heads // run.n_kv_heads
            sources = [MappedVectors.of_run(run, "queries", target.layer, target.head * group + member)
                       for member in range(group)]
        else:
            sources = [MappedVectors.of_run(run, "keys", target.layer, target.head)]
        rng = np.random.default_rng(seed)
        picks = np.sort(rng.choice(len(sources) * run.n_tokens, min(RECALL_SAMPLE, len(sources) * run.n_tokens),
                                   replace=False))
        return np.concatenate([source.read(picks[picks // run.n_tokens == number] % run.n_tokens)
                               for number, source in enumerate(sources)])

    def build(self, target: IndexTarget, seed: int = 0) -> tuple[IndexInfo, int]:
        """Make ``target`` searchable; ``(info, bytes on disk)``. Up to ``exact_limit`` tokens that stores
        nothing (and deletes the target's older files); past it an inverted file is built and stored
        (the lists, then their sidecar)."""
        index_path, sidecar_path = self.paths(target)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / (target.stem + LEGACY_INDEX_SUFFIX)).unlink(missing_ok=True)
        self._open.pop(target, None)
        if self.run.n_tokens <= self.exact_limit:
            sidecar_path.unlink(missing_ok=True)
            index_path.unlink(missing_ok=True)
            return ExactSearch(self.mapped(target)).info, 0
        index = build_inverted_lists(self.mapped(target), self.probe_queries(target, seed), seed=seed)
        sidecar_path.unlink(missing_ok=True)                # the old sidecar never vouches for the new file
        size = write_inverted_lists(index, index_path)
        run_files.write_json_atomic(sidecar_path, {
            "schema": PARTNER_INDEX_SCHEMA_VERSION, "run": self.run.manifest["fingerprint"], "side": target.side,
            "layer": target.layer, "head": target.head, "bytes": size, "sha256": run_files.file_sha256(index_path),
            "info": index.info.as_dict()})
        return index.info, size

    # -- use ----------------------------------------------------------------------------------
    def index(self, target: IndexTarget) -> ExactSearch | InvertedLists:
        """``target``'s search: the stored inverted file when there is one, else exact on the run's arrays;
        QkvizError when only an approximate index would do and none is stored."""
        if target in self._open:
            self._open.move_to_end(target)
            return self._open[target]
        info = self.stored_info(target)
        index: ExactSearch | InvertedLists | None = None
        if info is not None:
            try:
                index = read_inverted_lists(self.paths(target)[0], info, self.mapped(target))
            except (OSError, ValueError, KeyError) as error:
                logger.warning("partner index %s is not used: %s", self.paths(target)[0].name, error)
        if index is None and self.run.n_tokens <= self.exact_limit:
            index = ExactSearch(self.mapped(target))
        elif index is None:
            raise QkvizError(f"layer {target.layer} has no {target.side} index yet and {self.run.n_tokens:,} tokens are "
                             f"too many to search exactly: build it with 'qkviz index --run {self.run.path} "
                             f"--layers {target.layer}'")
        self._open[target] = index
        while len(self._open) > OPEN_INDEXES:
            self._open.popitem(last=False)
        return index

    def partners(self, layer: int, head: int, point: int, k: int = 10, exclude: np.ndarray | None = None) -> Partners:
        """The ``k`` highest-scoring partners, anywhere in the corpus, of joint-layout point ``point``
        of head ``(layer, head)`` (a query's keys or a key's queries); tokens where ``exclude`` (bool
        ``[token]``, e.g. the special tokens) is true are never partners."""
        run = self.run
        run.check_head(layer, head)
        if not 0 <= point < 2 * run.n_tokens:
            raise QkvizError(f"point {point} is out of range 0-{2 * run.n_tokens - 1} (queries then keys)")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise QkvizError(f"the number of partners must be a whole number of at least 1, got {k!r}")
        token, from_query = point % run.n_tokens, point < run.n_tokens
        rows = slice(token, token + 1)
        if from_query:
            vector = run.vector_rows("queries", layer, head, rows)[0]
            target = IndexTarget("keys", layer, run.kv_head(head))
        else:
            vector = run.vector_rows("keys", layer, head, rows)[0]
            target = IndexTarget("queries", layer, head)
        index = self.index(target)
        if k > run.n_tokens:
            logger.info("asked for %d partners of a corpus of %d tokens; returning all %d", k, run.n_tokens, run.n_tokens)
        scores, found = index.search(vector, k, exclude)
        kept = found[0] >= 0
        tokens, logits = found[0][kept][:k], self.logits(layer, head, scores[0][kept][:k])
        points = tokens + (run.n_tokens if from_query else 0)
        return Partners(layer, head, int(point), tokens, points, logits, index.info, int(k))

    def logits(self, layer: int, head: int, dots: np.ndarray) -> np.ndarray:
        """The content logits of dot products ``q . k`` of the head (float64): ``scale * q . k``, soft-capped where
        the layer caps; partners come from every sentence, so no position term (ALiBi) is added, and a sink, which
        is in every query's denominator alike, changes no ranking (:class:`qkviz.core.LogitRule`)."""
        return dot_logits(dots, self.run.logit_rule(layer, head))


# -- the layout's view of the same neighbourhood ------------------------------------------------
@dataclass(frozen=True)
class LayoutOverlap:
    """Of the ``k`` true partners, ``kept`` are among the ``k`` nearest points of the other kind in the
    layout; ``chance`` is what a random layout keeps on average (``k / n_tokens``)."""

    kept: int
    k: int
    chance: float

    @property
    def share(self) -> float:
        return self.kept / self.k if self.k else float("nan")


def layout_neighbours(layout: np.ndarray, point: int, k: int) -> np.ndarray:
    """int64 joint-layout indices of the ``k`` points of the other kind nearest to ``point`` in
    ``layout`` ``[2 * n_tokens, dim]`` (queries first), nearest first."""
    n_tokens = len(layout) // 2
    other = slice(n_tokens, 2 * n_tokens) if point < n_tokens else slice(0, n_tokens)
    distances = np.sum((layout[other] - layout[point]) ** 2, axis=1)
    k = min(k, n_tokens)
    nearest = np.argpartition(distances, k - 1)[:k]
    return nearest[np.argsort(distances[nearest], kind="stable")] + other.start


def layout_overlap(partners: Partners, layout: np.ndarray) -> LayoutOverlap:
    """How many of ``partners`` the layout puts among the clicked point's nearest points of the other kind."""
    neighbours = layout_neighbours(layout, partners.point, partners.k)
    kept = len(np.intersect1d(neighbours, partners.points))
    return LayoutOverlap(kept, partners.k, partners.k / (len(layout) // 2))


def head_layout_overlap(indexes: PartnerIndexes, layer: int, head: int, layout: np.ndarray, k: int = 10,
                        sample: int = 200, seed: int = 0) -> dict[str, float]:
    """The head's partner recall@``k`` in ``layout`` over a seeded sample of its queries and of its keys
    (:func:`qkviz.neighbours.partner_recall`, exact and tie-aware): ``{"query": ..., "key": ..., "chance": k / n_tokens}``."""
    run = indexes.run
    return partner_recall(run.queries(layer, head), run.keys(layer, head), run.logit_rule(layer, head), layout,
                          k=k, sample=sample, seed=seed)
