"""Global token search: which tokens match, and how many clusters the matches form in each head.

A query matches a token's text case-insensitively, surrounding spaces ignored: the whole token
by default, or any token containing it (``substring``). Matches come from the run's token index
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


class TokenSearch:
    """Cached search over one run: matches per (query, substring), cluster counts per method too."""

    def __init__(self, token_index: TokenIndex, layouts: Callable[[str], np.ndarray]):
        self._token_index = token_index
        self._layouts = layouts
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
        return f"{count:,} token" if count == 1 else f"{count:,} tokens"

    def _find(self, query: str, substring: bool) -> SearchResult:
        return SearchResult(query, substring, self._token_index.find(query, substring))

    def _clusters(self, query: str, substring: bool, method: str, version: int = 0) -> np.ndarray:
        """int64 ``[layer * n_heads + head]`` cluster counts of the matches in ``method``'s 2D layouts
        (``version`` tells layouts apart that changed while the app runs, e.g. the count of heads missing)."""
        return cluster_counts(self._layouts(method), self.find(query, substring).tokens)
