"""The matrix view's points: every head's sampled queries and keys placed in its grid cell (:func:`place`, as
uint16 grid units when they fit), the search's matches over all heads (:func:`match_traces`), and what the points
are coloured by -- query vs key, a token feature or the head's own vector norm -- with the colour bars of a
continuous colouring (:func:`colour_markers`, or :func:`raster_extras` when the heads are images).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dash_app.figure_parts import (KEY_COLOUR, KEY_MATCH_COLOUR, KEY_SCALE, MATCH_RING, QUERY_COLOUR, QUERY_MATCH_COLOUR,
                                   QUERY_SCALE, category_marker, legend_entries)
from dash_app.data.run_data import RunData
from dash_app.views.matrix.grid import Grid
from qkviz.report import CATEGORIES, colour_ticks, colour_title, colour_values


def place(points: np.ndarray, grid: Grid, tokens: np.ndarray, keys: bool, heads: np.ndarray | None = None):
    """Grid coordinates of the given tokens' queries (or keys) in every head (or in ``heads``, flat indices).

    ``points`` ``[head, 2 * n_tokens, 2]`` in the unit square (all heads, or those of ``heads``); returns
    ``(x, y, head)`` flat over heads, NaN (missing heads, heads the grid does not draw) dropped; x and y are uint16
    when the grid's coordinates fit (:meth:`Grid.fits_uint16`), else float32."""
    heads = np.arange(len(points)) if heads is None else np.asarray(heads)
    n_tokens = points.shape[1] // 2
    chosen = points[:, tokens + (n_tokens if keys else 0)]                       # [head, m, 2]
    x0, y0, width, height = grid.inner
    inside = np.empty(chosen.shape, dtype=np.float64)
    inside[..., 0] = x0 + chosen[..., 0] * width
    inside[..., 1] = y0 + chosen[..., 1] * height
    placed = grid.origins()[heads][:, None, :] + inside
    head = np.repeat(heads.astype(np.uint16), chosen.shape[1])
    flat = placed.reshape(-1, 2)
    keep = ~np.isnan(flat[:, 0]) & ~np.isnan(flat[:, 1])
    dtype = np.uint16 if grid.fits_uint16() else np.float32
    return np.rint(flat[keep, 0]).astype(dtype), np.rint(flat[keep, 1]).astype(dtype), head[keep]


def match_traces(points: np.ndarray, grid: Grid, matches: np.ndarray | None, raster: bool = False) -> list:
    """Traces 2 and 3: the matched tokens' queries and keys in every head (empty when not searching): WebGL,
    but in a rasterised matrix (``raster``) an empty SVG trace while there is no match (no WebGL context then)."""
    traces = []
    for name, colour, keys in (("query matches", QUERY_MATCH_COLOUR, False), ("key matches", KEY_MATCH_COLOUR, True)):
        x, y, head = place(points, grid, matches if matches is not None else np.zeros(0, np.int64), keys)
        kind = go.Scatter if raster and not len(x) else go.Scattergl
        traces.append(kind(x=x, y=y, customdata=head, mode="markers", name=name, hoverinfo="none",
                           marker=dict(color=colour, size=8, symbol="circle" if not keys else "diamond",
                                       line=dict(color=MATCH_RING, width=2))))
    return traces


def head_colours(data: RunData, colour: str) -> np.ndarray | None:
    """float32 ``[flat head, 2 * n_tokens]``: the value each head's queries and keys are coloured by (the
    token's feature, the same in every head, or the head's own vector norm); None for query vs key."""
    if colour == "type":
        return None
    if colour == "norm":
        return np.stack([data.norms(flat // data.run.n_heads, flat % data.run.n_heads)
                         for flat in range(data.n_total_heads)])
    values = colour_values(data.features[colour].to_numpy(), colour)
    return np.broadcast_to(np.concatenate([values, values])[None], (data.n_total_heads, 2 * data.run.n_tokens))


def placed_values(points: np.ndarray, values: np.ndarray, tokens: np.ndarray, keys: bool,
                  drawn: np.ndarray | None = None) -> np.ndarray:
    """float32 values of the points :func:`place` returns, in its order: ``values`` ``[head, 2 * n_tokens]``
    at the given tokens' queries (or keys), heads without a layout or not ``drawn`` (bool ``[head]``) dropped."""
    columns = tokens + (points.shape[1] // 2 if keys else 0)
    missing = np.isnan(points[:, columns, 0])
    if drawn is not None:
        missing |= ~np.asarray(drawn)[:, None]
    keep = ~missing.ravel()
    return np.ascontiguousarray(values[:, columns]).reshape(-1)[keep].astype(np.float32)


def colour_markers(points: np.ndarray, sample: np.ndarray, values: np.ndarray | None, colour: str,
                   drawn: np.ndarray | None = None) -> list[dict]:
    """The queries' and keys' marker colour fields: solid green and pink (``values`` None), one colour per
    category, or two sequential scales over one range with their bars side by side under the grid (``drawn``:
    bool ``[head]``, the heads the grid draws; None: all)."""
    if values is None:
        return [dict(color=QUERY_COLOUR), dict(color=KEY_COLOUR)]
    columns = np.concatenate([sample, sample + points.shape[1] // 2])
    sampled = values[:, columns]
    markers = []
    for side, scale in enumerate((QUERY_SCALE, KEY_SCALE)):
        placed = placed_values(points, values, sample, keys=side == 1, drawn=drawn)
        if colour in CATEGORIES:
            markers.append(dict(color=placed, **category_marker(len(CATEGORIES[colour]))))
            continue
        low, high = float(np.nanmin(sampled)), float(np.nanmax(sampled))
        high = high if high > low else low + 1
        markers.append(dict(color=placed, colorscale=scale, cmin=low, cmax=high, colorbar=point_bar(side, colour, low, high)))
    return markers


def point_bar(side: int, colour: str, low: float, high: float) -> dict:
    """The colour bar of the queries' (``side`` 0) or keys' (1) continuous colouring, side by side under the grid."""
    name = ("queries", "keys")[side]
    return dict(orientation="h", x=0.25 + 0.5 * side, xanchor="center", y=0, yanchor="top", ypad=10, len=0.42,
                thickness=10, title=dict(text=f"{name}: {colour_title(colour)}", side="top"),
                **colour_ticks(colour, low, high))


def raster_extras(colour: str, value_range: tuple[float, float] | None) -> list:
    """What a rasterised matrix adds after its legend: the queries' and keys' entries (query vs key), or the
    two colour bars of a continuous colouring over ``value_range`` (each on a point-less trace)."""
    if colour == "type":
        return legend_entries(["queries", "keys"], [QUERY_COLOUR, KEY_COLOUR], legendgroup="points")
    if colour in CATEGORIES or value_range is None:
        return []
    low, high = value_range
    return [go.Scatter(x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip", name=f"{side} scale",
                       marker=dict(color=[low, high], colorscale=scale, cmin=low, cmax=high, showscale=True,
                                   colorbar=point_bar(index, colour, low, high)))
            for index, (side, scale) in enumerate((("queries", QUERY_SCALE), ("keys", KEY_SCALE)))]
