"""Which tokens of a run are special, delimiters (special or punctuation) or image patches (their place on the patch
grid): what the head statistics tell a sink, a delimiter head and a place on the grid by."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np

from qkviz.store.run import StoredRun


def is_punctuation(text: str) -> bool:
    """True for a token made only of punctuation (after stripping spaces and word-piece marks)."""
    stripped = text.strip().removeprefix("##").strip("Ġ▁ ")
    return bool(stripped) and all(unicodedata.category(c).startswith("P") for c in stripped)


@dataclass(frozen=True)
class TokenKinds:
    """Per token of a run (global index): special, and delimiter (special or punctuation)."""

    special: np.ndarray     # bool [n_tokens]
    delimiter: np.ndarray   # bool [n_tokens]
    patch: np.ndarray | None = None   # int [n_tokens, 2]: (row, column) of image runs' patches, -1 for special

    @classmethod
    def of(cls, run: StoredRun) -> "TokenKinds":
        tokens = run.tokens
        special = tokens.is_special.to_numpy(bool)
        if run.is_image_run:
            patch = np.stack([tokens.patch_row.to_numpy(np.int64), tokens.patch_col.to_numpy(np.int64)], axis=1)
            return cls(special=special, delimiter=special, patch=patch)
        punctuation = np.array([is_punctuation(str(t)) for t in tokens.token], dtype=bool)
        return cls(special=special, delimiter=special | punctuation)
