"""An image run's image ids, searched like tokens: the global search's matches by image id.

An id equal to the query (case-insensitive, spaces around ignored), or holding it with ``substring``,
matches every token of its image.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


class ImageIds:
    """The image ids of an image run's ``sentences`` table (one row per image: ``text`` its id,
    ``first_token`` and ``n_tokens`` its tokens)."""

    def __init__(self, sentences: pd.DataFrame):
        self._ids = np.array([str(text).strip().lower() for text in sentences.text])
        self._first = sentences.first_token.to_numpy(np.int64)
        self._count = sentences.n_tokens.to_numpy(np.int64)

    def images(self, query: str, substring: bool) -> np.ndarray:
        """int64 ``[n]``: the images whose id is ``query`` (or holds it, with ``substring``); none for a blank one."""
        wanted = query.strip().lower()
        if not wanted:
            return np.zeros(0, dtype=np.int64)
        hits = np.char.find(self._ids, wanted) >= 0 if substring else self._ids == wanted
        return np.flatnonzero(hits)

    def tokens(self, images: np.ndarray) -> np.ndarray:
        """int64 ``[n]``: every token of ``images``, in order."""
        if not len(images):
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(self._first[i], self._first[i] + self._count[i]) for i in images])
