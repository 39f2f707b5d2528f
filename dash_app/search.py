"""Global token search: which tokens match, and how many clusters the matches form in each head.

A query matches a token's text case-insensitively, surrounding spaces ignored: the whole token
by default, or any token containing it (``substring``); in an image run it also matches image ids, each
matching image giving all its tokens (:class:`ImageIds`). Matches come from the run's token index
(:mod:`qkviz.search.token_index`: a binary search, or a scan of the vocabulary for a substring), never
from a scan of the tokens. The cluster count of a head is the number
of connected groups the matched queries and keys form in its normalised 2D layout: the unit
square is cut into ``grid`` x ``grid`` cells, and occupied cells that touch (sides or corners)
join one cluster -- single-linkage clustering at a radius of about one cell, for every head at
once with one labelling pass. Few clusters suggest a head that groups the token by meaning; many,
one that spreads it by position.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import ndimage

from qkviz.search import TokenIndex

#: cells per side of the grid the cluster count is taken on (a cluster radius of ~4% of the layout).
CLUSTER_GRID = 24
#: in-plane neighbours only: clusters never join across heads.
_IN_PLANE = np.zeros((3, 3, 3), dtype=bool)
_IN_PLANE[1] = True


@dataclass(frozen=True)
class SearchResult:
    """The tokens matching one query: int64 ``[n_matches]`` indices into the run's token table."""

    query: str
    substring: bool
    tokens: np.ndarray

    @property
    def count(self) -> int:
        return int(len(self.tokens))


def cluster_counts(points: np.ndarray, tokens: np.ndarray, grid: int = CLUSTER_GRID) -> np.ndarray:
    """int64 ``[head]``: clusters formed by the tokens' queries and keys in each head's layout.

    ``points`` is ``[head, 2 * n_tokens, 2]`` in the unit square (queries first; NaN for a head
    without a layout, which gets -1)."""
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


class ImageIds:
    """An image run's image ids, searched like tokens: an id equal to the query (case-insensitive, spaces around
    ignored), or holding it with ``substring``, matches every token of its image."""

    def __init__(self, sentences):
        self._ids = np.array([str(text).strip().lower() for text in sentences.text])
        self._first = sentences.first_token.to_numpy(np.int64)
        self._count = sentences.n_tokens.to_numpy(np.int64)

    def images(self, query: str, substring: bool) -> np.ndarray:
        wanted = query.strip().lower()
        if not wanted:
            return np.zeros(0, dtype=np.int64)
        hits = np.char.find(self._ids, wanted) >= 0 if substring else self._ids == wanted
        return np.flatnonzero(hits)

    def tokens(self, images: np.ndarray) -> np.ndarray:
        if not len(images):
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(self._first[i], self._first[i] + self._count[i]) for i in images])


class TokenSearch:
    """Cached search over one run: matches per (query, substring), cluster counts per method too. An image run's
    search (``images``) also matches image ids: every token of a matching image."""

    def __init__(self, token_index: TokenIndex, layouts: Callable[[str], np.ndarray], images: ImageIds | None = None):
        self._token_index = token_index
        self._layouts = layouts
        self._images = images
        self.find = lru_cache(maxsize=64)(self._find)
        self.clusters = lru_cache(maxsize=64)(self._clusters)

    def matches(self, query: str, substring: bool) -> np.ndarray | None:
        """int64 ``[n_matches]`` token indices matching ``query``, or None when it is blank (no search)."""
        return self.find(query, substring).tokens if query.strip() else None

    def count_text(self, query: str, substring: bool) -> str:
        """``"3 tokens"`` (``"1 token"``) matched, for the search box; ``""`` when ``query`` is blank. (Each
        token is two points of a head, its query and its key: the matrix's cluster counts count both.)"""
        if not query.strip():
            return ""
        count = self.find(query, substring).count
        text = f"{count:,} token" if count == 1 else f"{count:,} tokens"
        images = 0 if self._images is None else len(self._images.images(query, substring))
        return text if not images else f"{text} ({images:,} image{'s' if images > 1 else ''} by id)"

    def _find(self, query: str, substring: bool) -> SearchResult:
        tokens = self._token_index.find(query, substring)
        if self._images is not None:
            tokens = np.union1d(tokens, self._images.tokens(self._images.images(query, substring))).astype(np.int64)
        return SearchResult(query, substring, tokens)

    def _clusters(self, query: str, substring: bool, method: str, version: int = 0) -> np.ndarray:
        """int64 ``[layer * n_heads + head]`` cluster counts of the matches in ``method``'s 2D layouts
        (``version`` tells layouts apart that changed while the app runs, e.g. the count of heads missing)."""
        return cluster_counts(self._layouts(method), self.find(query, substring).tokens)
