"""One attention logit split exactly: by query part x key part, by one side's parts, or by dimension.

The logit of query ``i`` and key ``j`` of a head is ``scale * q_i . k_j`` (plus the run's pairwise term, ALiBi's
``slope * (j - i)``, where it has one). When ``q_i = sum_a q_a`` and ``k_j = sum_b k_b`` over the parts of the
residual stream that wrote them (:mod:`qkviz.extraction.residual.residual_parts`), the logit is exactly

* ``sum_{a,b} scale * q_a . k_b`` (``by="pair"``: one row per query part x key part),
* ``sum_a scale * q_a . k_j`` (``by="query"``: each query part against the whole key),
* ``sum_b scale * q_i . k_b`` (``by="key"``: the whole query against each key part),
* ``sum_d scale * q_i[d] k_j[d]`` (``by="dimension"``), summed over rotary frequency bands where the run holds the
  model's rotary tables: the pair of dimensions ``(t, t + half)`` turns with one frequency, whose wavelength (in
  tokens) says whether the band matches nearby or distant tokens; dimensions the model does not rotate are one band.

These functions are numpy only: they take the parts and return tables. Soft-capped models (Gemma 2) are split before
the cap (``attrs["softcap"]`` says so).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BY = ("pair", "query", "key", "dimension")
#: the wavelengths (tokens) that bound the rotary frequency bands
BAND_EDGES = (16.0, 128.0, 1024.0, 8192.0)
#: the name of the pairwise position term's row (ALiBi), beside the parts
POSITION_TERM = "alibi"


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    order = np.argsort(-frame["contribution"].abs().to_numpy(), kind="stable")
    return frame.iloc[order].reset_index(drop=True)


def pair_split(query_names: list[str], query_parts: np.ndarray, key_names: list[str], key_parts: np.ndarray,
               scale: float, position_term: float = 0.0) -> pd.DataFrame:
    """Columns ``query_part``, ``key_part``, ``contribution`` (``scale * q_a . k_b``), largest magnitude first;
    the position term, if any, is one row of its own."""
    products = scale * (np.asarray(query_parts, dtype=np.float64) @ np.asarray(key_parts, dtype=np.float64).T)
    frame = pd.DataFrame({"query_part": np.repeat(query_names, len(key_names)),
                          "key_part": np.tile(key_names, len(query_names)),
                          "contribution": products.reshape(-1)})
    if position_term:
        frame.loc[len(frame)] = [POSITION_TERM, POSITION_TERM, float(position_term)]
    return _sorted(frame)


def side_split(names: list[str], parts: np.ndarray, other: np.ndarray, scale: float,
               position_term: float = 0.0) -> pd.DataFrame:
    """Columns ``part``, ``contribution``: each part of one side against the other side's whole vector."""
    contributions = scale * (np.asarray(parts, dtype=np.float64) @ np.asarray(other, dtype=np.float64))
    frame = pd.DataFrame({"part": list(names), "contribution": contributions})
    if position_term:
        frame.loc[len(frame)] = [POSITION_TERM, float(position_term)]
    return _sorted(frame)


def rotary_frequencies(cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """The angle per position of each rotary pair (``[rotary_dim / 2]``, radians), read from the model's own tables
    (``[position, rotary_dim]``, the ``rotate_half`` convention) at position 1."""
    half = cos.shape[-1] // 2
    return np.abs(np.arctan2(sin[1, :half].astype(np.float64), cos[1, :half].astype(np.float64)))


def _band_label(low: float, high: float) -> str:
    if np.isinf(high):
        return f"rotary, wavelength >= {low:g} tokens"
    return f"rotary, wavelength {low:g}-{high:g} tokens" if low else f"rotary, wavelength < {high:g} tokens"


def dimension_split(query: np.ndarray, key: np.ndarray, scale: float,
                    rotary: tuple[np.ndarray, np.ndarray] | None = None,
                    position_term: float = 0.0) -> pd.DataFrame:
    """The logit over dimensions. Without rotary tables: one row per dimension (``band`` ``dim d``). With them:
    one row per rotary frequency band (columns ``band``, ``dimensions``, ``wavelength_min``, ``wavelength_max``,
    ``contribution``; shortest wavelengths first) and one for the dimensions not rotated."""
    products = scale * np.asarray(query, dtype=np.float64) * np.asarray(key, dtype=np.float64)
    rows = []
    if rotary is None:
        rows = [(f"dim {d}", 1, np.nan, np.nan, float(value)) for d, value in enumerate(products)]
    else:
        cos, sin = rotary
        rotary_dim, half = cos.shape[-1], cos.shape[-1] // 2
        angles = rotary_frequencies(cos, sin)
        wavelengths = np.where(angles > 0, 2 * np.pi / np.maximum(angles, 1e-300), np.inf)
        per_pair = products[:half] + products[half:rotary_dim]
        edges = (0.0, *BAND_EDGES, np.inf)
        for low, high in zip(edges[:-1], edges[1:]):
            inside = (wavelengths >= low) & (wavelengths < high)
            if inside.any():
                rows.append((_band_label(low, high), 2 * int(inside.sum()), float(wavelengths[inside].min()),
                             float(wavelengths[inside].max()), float(per_pair[inside].sum())))
        if rotary_dim < len(products):
            rows.append(("not rotated", len(products) - rotary_dim, np.nan, np.nan,
                         float(products[rotary_dim:].sum())))
    if position_term:
        rows.append((POSITION_TERM, 0, np.nan, np.nan, float(position_term)))
    return pd.DataFrame(rows, columns=["band", "dimensions", "wavelength_min", "wavelength_max", "contribution"])
