"""Aligning a head's keys with its queries before projecting them together (numpy only).

AttentionViz's joint embedding puts every query and key of a head in one point cloud, so that a
query lies near the keys it attends to. Two transformations make that work without changing any
attention weight:

* key translation: ``k' = k - mean(K) + mean(Q)`` adds ``q . (mean(Q) - mean(K))`` to every
  logit of query ``q``, a constant per query, which the softmax removes;
* norm scaling: ``q * c`` and ``k' / c`` with ``c = sqrt(mean |k'| / mean |q|)`` leave every dot
  product unchanged and make the mean norms of queries and keys equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Alignment:
    """Which of the two attention-preserving transformations to apply (both by default)."""

    translate_keys: bool = True
    scale_norms: bool = True

    def as_dict(self) -> dict:
        return {"translate_keys": self.translate_keys, "scale_norms": self.scale_norms}


@dataclass(frozen=True)
class AlignedHead:
    """A head's joint point cloud ``[2 * n_tokens, d_head]``: queries first, then keys."""

    points: np.ndarray
    key_translation: np.ndarray   # what was added to every key (before scaling)
    norm_scale: float             # c: queries were multiplied by it, keys divided

    @property
    def n_tokens(self) -> int:
        return len(self.points) // 2

    @property
    def queries(self) -> np.ndarray:
        return self.points[:self.n_tokens]

    @property
    def keys(self) -> np.ndarray:
        return self.points[self.n_tokens:]


def align_head(queries: np.ndarray, keys: np.ndarray, alignment: Alignment = Alignment()) -> AlignedHead:
    """Stack a head's queries and keys (``[token, d_head]`` each) into one aligned cloud."""
    queries = np.asarray(queries, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    if queries.shape != keys.shape or queries.ndim != 2:
        raise ValueError(f"queries {queries.shape} and keys {keys.shape} must both be [token, d_head]")
    translation = np.zeros(queries.shape[1])
    if alignment.translate_keys:
        translation = queries.mean(axis=0) - keys.mean(axis=0)
        keys = keys + translation
    scale = 1.0
    if alignment.scale_norms:
        scale = norm_scale(queries, keys)
        queries, keys = queries * scale, keys / scale
    points = np.concatenate([queries, keys]).astype(np.float32)
    return AlignedHead(points=points, key_translation=translation.astype(np.float32), norm_scale=scale)


def norm_scale(queries: np.ndarray, keys: np.ndarray) -> float:
    """``c = sqrt(mean |k| / mean |q|)``: ``q * c`` and ``k / c`` have equal mean norms (1 if either is 0)."""
    query_norm = np.linalg.norm(queries, axis=1).mean()
    key_norm = np.linalg.norm(keys, axis=1).mean()
    return float(np.sqrt(key_norm / query_norm)) if query_norm > 0 and key_norm > 0 else 1.0
