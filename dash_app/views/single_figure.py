"""The single-head view's figure: one head's queries and keys (WebGL 2D or 3D), coloured by a token feature
(a colour bar per kind, or a legend for categories), and the overlays a click adds (see :mod:`dash_app.views.single`
for the trace slots): the clicked point's sentence, its attention lines, the point and its corpus partners.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from dash import Patch

from dash_app.figure_parts import (CATEGORY_COLOURS, KEY_COLOUR, KEY_MATCH_COLOUR, KEY_SCALE, LINE_COLOUR, MATCH_RING,
                                   OPACITY_STEPS, QUERY_COLOUR, QUERY_MATCH_COLOUR, QUERY_SCALE, category_marker,
                                   legend_entries, opacity_step, step_opacity)
from dash_app.data.run_data import RunData
from qkviz.analysis import adjusted_attention, moved_norms
from qkviz.report import CATEGORIES, COLOURS, colour_ticks, colour_title, colour_values

PARTNER_COLOUR = "#ff7f00"
#: token labels are drawn only while at most this many points are in view (zoom in to see them)
LABEL_LIMIT = 300
#: the part of the cloud the 3D axes' range spans (quantiles of each axis, then a margin); the few points
#: beyond (outliers that would shrink the cloud to a corner of its box) are left out of view, never dropped
CLOUD_QUANTILES = (0.005, 0.995)
CLOUD_MARGIN = 0.08
KIND = ("query", "key")
#: the slots of the queries and keys (their texts and ids are those of the run's tokens, in every head)
BASE_POINT_SLOTS = (0, 1)
#: colour features whose scale is fixed (the same colour means the same value from head to head, run to run)
FIXED_RANGES = {"position": (0.0, 1.0)}
#: marker symbols of queries and keys when colour tells categories apart
SYMBOLS = ("circle", "diamond")
#: a 2D head's coordinates go to the browser as whole steps of its layout's extent, uint16 (see :func:`to_steps`)
STEPS = 65535


def colour_array(data: RunData, colour: str, layer: int, head: int) -> np.ndarray | None:
    """float32 ``[2 * n_tokens]`` values the colour scale maps (queries then keys); None for query vs key."""
    if colour == "type":
        return None
    if colour == "norm":
        return data.norms(layer, head)
    values = colour_values(data.features[colour].to_numpy(), colour)
    return np.concatenate([values, values])


def to_steps(coordinates: np.ndarray) -> np.ndarray:
    """2D ``coordinates`` ``[n, 2]`` as uint16 whole steps of their larger extent (:data:`STEPS` of them, one scale
    for both axes, keeping the shape) from their lower-left corner: half of float32's bytes to send and parse. A
    step is under one 65,535th of the plot's width, less than a pixel of any screen; the figure's hidden axes
    are in steps. 3D coordinates, or ones with a NaN, are returned as they are."""
    if coordinates.ndim != 2 or coordinates.shape[1] != 2 or not len(coordinates) or not np.isfinite(coordinates).all():
        return coordinates
    low = coordinates.min(axis=0).astype(np.float64)
    extent = float(np.max(coordinates.max(axis=0) - low))
    scale = STEPS / extent if extent > 0 else 0.0
    return np.rint((coordinates - low) * scale).clip(0, STEPS).astype(np.uint16)


def norm_sizes(norms: np.ndarray, smallest: float = 2.0, largest: float = 10.0) -> np.ndarray:
    """float32 ``[n]`` marker sizes growing linearly with ``norms`` ``[n]``."""
    low, high = float(np.min(norms)), float(np.max(norms))
    scaled = (norms - low) / (high - low) if high > low else np.zeros_like(norms)
    return (smallest + scaled * (largest - smallest)).astype(np.float32)


def colour_bar(colour: str, title: str, x: float, low: float, high: float) -> dict:
    """A continuous colour's bar at ``x`` (paper units); a log-scale feature's ticks read as counts."""
    return dict(title=dict(text=title, side="right"), x=x, thickness=12, len=0.8, **colour_ticks(colour, low, high))


def colour_marker(values: np.ndarray, colour: str, scale: list, title: str, bar_x: float) -> dict:
    """The marker fields colouring ``values`` (one side's ``[n]``): by category (a stepped scale, no bar; the
    legend names the categories) or on ``scale`` with its bar (range fixed for :data:`FIXED_RANGES`)."""
    if colour in CATEGORIES:
        return dict(color=values, **category_marker(len(CATEGORIES[colour])))
    low, high = FIXED_RANGES.get(colour, (float(np.nanmin(values)), float(np.nanmax(values))))
    high = high if high > low else low + 1
    return dict(color=values, colorscale=scale, cmin=low, cmax=high, colorbar=colour_bar(colour, title, bar_x, low, high))


def category_legend(colour: str, dim: int) -> list:
    """The legend of a categorical colouring (one entry per category), or none."""
    if colour not in CATEGORIES:
        return []
    names = CATEGORIES[colour]
    return legend_entries(names, CATEGORY_COLOURS[:len(names)], go.Scatter3d if dim == 3 else go.Scattergl,
                          title=f"{COLOURS[colour]} (queries ●, keys ◆)")


# -- traces ---------------------------------------------------------------------------------
def _trace(dim: int, coordinates: np.ndarray, **kwargs) -> go.Scattergl | go.Scatter3d:
    """A WebGL scatter of ``coordinates`` ``[n, dim]`` (``scattergl`` in 2D, ``scatter3d`` in 3D)."""
    axes = {"x": coordinates[:, 0], "y": coordinates[:, 1]}
    if dim == 3:
        return go.Scatter3d(z=coordinates[:, 2], **axes, **kwargs)
    return go.Scattergl(**axes, **kwargs)


def _segments(start: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """float32 ``[3 * n, dim]``: ``start -> end`` for each of ``ends`` ``[n, dim]``, NaN-separated."""
    segments = np.full((len(ends), 3, ends.shape[1]), np.nan, dtype=np.float32)
    segments[:, 0] = start
    segments[:, 1] = ends
    return segments.reshape(-1, ends.shape[1])


def base_traces(coordinates: np.ndarray, texts: np.ndarray, values: np.ndarray | None, colour: str,
                sizes: np.ndarray | None, labels: bool, matches: np.ndarray, token_fields: bool = True) -> list:
    """Slots 0-3: queries, keys and the search matches among them.

    ``coordinates`` ``[2 * n_tokens, dim]``; ``texts`` ``[n_tokens]`` escaped token labels; ``values``
    ``[2 * n_tokens]`` colour values or None; ``sizes`` ``[2 * n_tokens]`` or None; ``matches`` token indices.
    Without ``token_fields`` the queries and keys have no ``text`` and ``customdata`` (see :func:`head_patch`)."""
    n_tokens, dim = len(coordinates) // 2, coordinates.shape[1]
    # labels only when few points are drawn; with more, the browser adds them once zoomed in (labelsOnZoom)
    mode = "markers+text" if labels and 2 * n_tokens <= LABEL_LIMIT else "markers"
    traces = []
    for side, name, solid, scale, bar_x in ((0, "queries", QUERY_COLOUR, QUERY_SCALE, 1.02),
                                            (1, "keys", KEY_COLOUR, KEY_SCALE, 1.12)):
        rows = slice(side * n_tokens, (side + 1) * n_tokens)
        marker = dict(size=sizes[rows] if sizes is not None else (3 if dim == 2 else 2), opacity=0.75)
        if values is None:
            marker["color"] = solid
        else:
            if colour in CATEGORIES:
                marker["symbol"] = SYMBOLS[side]
            marker.update(colour_marker(values[rows], colour, scale, f"{name}: {colour_title(colour)}", bar_x))
        tokens = dict(text=texts, customdata=np.arange(rows.start, rows.stop, dtype=np.int32)) if token_fields else {}
        traces.append(_trace(dim, coordinates[rows], name=name, mode=mode, marker=marker, **tokens,
                             hovertemplate=f"%{{text}}<extra>{KIND[side]}</extra>", textfont=dict(size=9)))
    # the matches above the cloud, enlarged and ringed so that a rare token's one or two points stand out
    for side, name, colour_, symbol in ((0, "query matches", QUERY_MATCH_COLOUR, "circle"),
                                        (1, "key matches", KEY_MATCH_COLOUR, "diamond")):
        points = (matches + side * n_tokens).astype(np.int32)
        ring = dict(color=MATCH_RING, width=3 if dim == 2 else 2)
        traces.append(_trace(dim, coordinates[points], name=name, mode="markers", text=texts[matches],
                             customdata=points, hovertemplate=f"%{{text}}<extra>{KIND[side]}</extra>",
                             marker=dict(color=colour_, size=12 if dim == 2 else 6, symbol=symbol, line=ring),
                             showlegend=len(points) > 0))
    return traces


def overlay_traces(data: RunData, coordinates: np.ndarray, layer: int, head: int, point: int | None,
                   top_k: int, threshold: float, partners: np.ndarray | None = None,
                   weighting: str = "attention") -> list[dict]:
    """Slots 4 onwards, as plain dicts: the clicked point's sentence (labelled), lines to the points
    it attends to most (or, for a key, from the queries attending to it most), the point itself, and
    its corpus-wide ``partners`` (joint-layout indices) as stars. With ``weighting`` ``"value"`` the lines are
    the value-weighted attention (each query's share, :func:`qkviz.analysis.adjusted_attention` with
    :func:`qkviz.analysis.moved_norms`).

    Empty traces when nothing is clicked, so a ``Patch`` can replace the slots in place."""
    dim, n_tokens = coordinates.shape[1], len(coordinates) // 2
    empty = np.zeros((0, dim), dtype=np.float32)
    sentence_rows = np.zeros(0, dtype=np.int64)
    line_ends, weights = empty, np.zeros(0)
    if point is not None:
        token, is_key = point % n_tokens, point >= n_tokens
        sentence = data.sentence_of(token)
        sentence_rows = data.sentence_rows(sentence)
        attention = data.run.attention(layer, head, sentence)                  # [query, key] of the sentence
        if weighting == "value":
            attention = adjusted_attention(attention, np.zeros(len(attention), dtype=bool),
                                           moved_norms(data.run, layer, head)[sentence_rows])
        local = token - sentence_rows[0]
        row = attention[:, local] if is_key else attention[local]
        chosen = [i for i in np.argsort(-row, kind="stable")[:max(int(top_k), 0)] if row[i] >= threshold]
        weights = row[chosen]
        line_ends = coordinates[sentence_rows[chosen] + (0 if is_key else n_tokens)]
    traces = []
    for side, name, colour in ((0, "sentence queries", QUERY_MATCH_COLOUR), (1, "sentence keys", KEY_MATCH_COLOUR)):
        points = (sentence_rows + side * n_tokens).astype(np.int32)
        traces.append(_trace(dim, coordinates[points], name=name, mode="markers+text", customdata=points,
                             text=data.display_text[sentence_rows], textposition="top center",
                             textfont=dict(size=11, color=colour), hovertemplate=f"%{{text}}<extra>{KIND[side]}</extra>",
                             marker=dict(color=colour, size=7, line=dict(color="white", width=1)),
                             showlegend=len(points) > 0))
    steps = opacity_step(weights)
    origin = coordinates[point] if point is not None else None
    for step in range(OPACITY_STEPS):
        ends = line_ends[steps == step]
        segments = _segments(origin, ends) if len(ends) else empty
        traces.append(_trace(dim, segments, mode="lines", hoverinfo="skip", showlegend=False, name="attention",
                             line=dict(color=LINE_COLOUR, width=2), opacity=step_opacity(step)))
    ring = coordinates[[point]] if point is not None else empty
    traces.append(_trace(dim, ring, mode="markers", name="clicked", showlegend=False, hoverinfo="skip",
                         marker=dict(color="black", size=16, symbol="circle-open", line=dict(width=3))))
    partners = np.zeros(0, dtype=np.int64) if partners is None or point is None else np.asarray(partners)
    traces.append(_trace(dim, coordinates[partners], mode="markers", name="corpus partners",
                         text=data.display_text[partners % n_tokens], customdata=partners.astype(np.int32),
                         hovertemplate="%{text}<extra>corpus partner</extra>", showlegend=len(partners) > 0,
                         marker=dict(color=PARTNER_COLOUR, size=12 if dim == 2 else 6, symbol="star" if dim == 2 else "diamond",
                                     line=dict(color="black", width=1))))
    return [trace.to_plotly_json() for trace in traces]


def cloud_ranges(coordinates: np.ndarray) -> list[list[float]]:
    """``[low, high]`` per axis of ``coordinates`` ``[n, dim]``: the :data:`CLOUD_QUANTILES` of the points, widened
    by :data:`CLOUD_MARGIN` and made equally long (a cube, so that distances read alike on every axis)."""
    finite = coordinates[np.isfinite(coordinates).all(axis=1)]
    if not len(finite):
        return [[-1.0, 1.0]] * coordinates.shape[1]
    low, high = np.quantile(finite, CLOUD_QUANTILES, axis=0)
    centre, half = (low + high) / 2, float(np.max(high - low)) / 2 * (1 + 2 * CLOUD_MARGIN) or 1.0
    return [[float(c - half), float(c + half)] for c in centre]


def single_figure(base: list, overlays: list[dict], dim: int, title: str, revision: str,
                  coordinates: np.ndarray | None = None, legend: list | None = None,
                  axis_names: tuple[str, ...] = ("x", "y", "z")) -> go.Figure:
    """The figure: ``base`` (slots 0-3), ``overlays`` (slots 4 on), then ``legend`` (legend-only entries); it
    fills its graph's box. In 3D, axes named ``axis_names`` with a grid whose range fits the cloud of
    ``coordinates``."""
    figure = go.Figure(base + overlays + (legend or []))
    figure.update_layout(autosize=True, margin=dict(l=10, r=10, t=40, b=10), uirevision=revision, plot_bgcolor="white",
                         title=dict(text=title, font=dict(size=14)), hovermode="closest",
                         legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0.35, groupclick="toggleitem"))
    if dim == 2:
        figure.update_xaxes(visible=False)
        figure.update_yaxes(visible=False, scaleanchor="x")
    else:
        ranges = cloud_ranges(coordinates) if coordinates is not None else [None] * 3
        axis = dict(showgrid=True, gridcolor="#d8d8d8", showbackground=True, backgroundcolor="#fafafa",
                    zeroline=False, showticklabels=False, showspikes=False)
        figure.update_scenes(aspectmode="cube", domain=dict(x=[0, 0.82]),
                             camera=dict(eye=dict(x=1.3, y=1.3, z=0.9)),
                             **{f"{axis_id}axis": dict(axis, range=span, title=dict(text=name))
                                for axis_id, span, name in zip("xyz", ranges, axis_names)})
    return figure


def head_patch(figure: go.Figure) -> Patch:
    """``figure`` as a ``Patch`` of a drawn one of another head of the same run, colouring and options: every
    trace and the layout again, but the queries' and keys' texts and ids (the run's tokens, the same in every
    head; 100,000 tokens' labels are half of a figure's bytes and most of its time on the server) are left as
    drawn. ``figure`` is best made without them (``base_traces(..., token_fields=False)``)."""
    full = figure.to_dict()                                   # numpy arrays as typed arrays
    patch = Patch()
    for slot, trace in enumerate(full["data"]):
        if slot in BASE_POINT_SLOTS:
            for name, value in trace.items():
                if name not in ("text", "customdata"):
                    patch["data"][slot][name] = value
        else:
            patch["data"][slot] = trace
    patch["layout"] = full["layout"]
    return patch


# -- the callback's work --------------------------------------------------------------------
