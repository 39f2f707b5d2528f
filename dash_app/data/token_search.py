"""The top bar's token search over one run, cached: which tokens match, and how many clusters they form per head.

A query matches a token's text case-insensitively, surrounding spaces ignored: the whole token by default, or
any token containing it (``substring``); in an image run it also matches image ids, each matching image giving
all its tokens (:class:`qkviz.search.ImageIds`). Matches come from the run's token index
(:class:`qkviz.search.TokenIndex`: a binary search, or a scan of the vocabulary for a substring), never from a
scan of the tokens; the cluster counts are :func:`qkviz.analysis.cluster_counts` of the matches in each head's
2D layout. The matrix and single views read one :class:`TokenSearch` per run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from qkviz.analysis import cluster_counts
from qkviz.search import ImageIds, TokenIndex


@dataclass(frozen=True)
class SearchResult:
    """The tokens matching one query: int64 ``[n_matches]`` indices into the run's token table."""

    query: str
    substring: bool
    tokens: np.ndarray

    @property
    def count(self) -> int:
        return int(len(self.tokens))


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
