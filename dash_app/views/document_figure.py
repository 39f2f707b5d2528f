"""The document view's pictures: the map of a region as one server-made image on a log colour scale, its axes' token
labels, the head's profile against distance, its scores and the token strip under the map (the view itself, its cache
and callbacks: :mod:`dash_app.views.document`)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from dash import html

from dash_app.figure_parts import png_data_uri
from qkviz.analysis import HeadProfile, PooledMap, RepeatedSpan
from qkviz.analysis.labels import INDUCTION

#: the map's plot area, in CSS pixels a side: the image is at most this many pixels a side (the request's bound)
MAP_PIXELS = 640
MARGIN = dict(l=80, r=20, t=36, b=80)
#: axes are labelled with tokens once the region on screen spans at most this many
LABELLED_TOKENS = 48
#: tokens the strip shows of each axis (the first of the region; zoom in for the rest)
STRIP_TOKENS = 300
#: log10 weights from LOG_FLOOR (white) to 0 (darkest); the mask's forbidden pairs are MASKED_RGB
LOG_FLOOR = -4.0
SCALE_STOPS = np.array([0.0, 0.35, 0.7, 1.0])
SCALE_RGB = np.array([[255, 255, 255], [198, 219, 239], [74, 152, 201], [8, 48, 107]], dtype=float)
MASKED_RGB = np.array([214, 214, 214], dtype=np.uint8)


def colour_key() -> html.Div:
    """The map's colour scale as a line of text and a gradient (the image carries no colour bar)."""
    stops = ", ".join(f"rgb({r:.0f},{g:.0f},{b:.0f}) {100 * at:.0f}%" for at, (r, g, b) in zip(SCALE_STOPS, SCALE_RGB))
    return html.Div(style={"display": "flex", "gap": "8px", "alignItems": "center", "fontSize": "12px"}, children=[
        html.Span(f"weight 1e{LOG_FLOOR:.0f}"),
        html.Div(style={"width": "200px", "height": "12px", "background": f"linear-gradient(to right, {stops})",
                        "border": "1px solid #aaa"}),
        html.Span("1 (log scale);"),
        html.Div(style={"width": "12px", "height": "12px", "background": "rgb(214,214,214)"}),
        html.Span("masked (the model cannot attend)"),
    ])


def map_colours(pooled: PooledMap) -> np.ndarray:
    """uint8 ``[height, width, 3]``: each pixel's log weight on the scale, forbidden pixels grey."""
    with np.errstate(divide="ignore"):
        level = np.clip((np.log10(pooled.values) - LOG_FLOOR) / -LOG_FLOOR, 0.0, 1.0)
    rgb = np.stack([np.interp(level, SCALE_STOPS, SCALE_RGB[:, channel]) for channel in range(3)], axis=-1)
    image = np.rint(rgb).astype(np.uint8)
    image[~pooled.allowed] = MASKED_RGB
    return image


def image_trace(pooled: PooledMap) -> dict:
    """The map's image trace: token ``j`` of an axis is centred on ``j``, the image spanning the region's cells."""
    rows, columns = pooled.row_edges, pooled.column_edges
    dx = (columns[-1] - columns[0]) / (len(columns) - 1)
    dy = (rows[-1] - rows[0]) / (len(rows) - 1)
    # hoverinfo "none": no label, but a click still fires (a cell clicked is a pair for the why panel)
    return dict(type="image", source=png_data_uri(map_colours(pooled)), x0=float(columns[0] - 0.5 + dx / 2), dx=dx,
                y0=float(rows[0] - 0.5 + dy / 2), dy=dy, hoverinfo="none")


def axis_labels(start: int, stop: int, texts: np.ndarray) -> dict:
    """Token labels on an axis over ``[start, stop)`` when it spans at most :data:`LABELLED_TOKENS`, else numbers."""
    if stop - start > LABELLED_TOKENS:
        return dict(tickmode="auto", tickvals=None, ticktext=None)
    positions = np.arange(start, stop)
    return dict(tickmode="array", tickvals=positions.tolist(), ticktext=[f"{texts[p]} {p}" for p in positions])


def map_figure(pooled: PooledMap, texts: np.ndarray, title: str, revision: str) -> go.Figure:
    """The map of ``pooled``'s region (``texts``: the document's labels, escaped for Plotly)."""
    rows, columns = pooled.row_edges, pooled.column_edges
    figure = go.Figure(image_trace(pooled))
    figure.update_layout(
        width=MAP_PIXELS + MARGIN["l"] + MARGIN["r"], height=MAP_PIXELS + MARGIN["t"] + MARGIN["b"], margin=MARGIN,
        title=dict(text=title, font=dict(size=13)), dragmode="zoom", uirevision=revision, plot_bgcolor="white",
        xaxis=dict(title="key position", range=[columns[0] - 0.5, columns[-1] - 0.5], showgrid=False, zeroline=False,
                   tickfont=dict(size=10), **axis_labels(int(columns[0]), int(columns[-1]), texts)),
        yaxis=dict(title="query position", range=[rows[-1] - 0.5, rows[0] - 0.5], showgrid=False, zeroline=False,
                   tickfont=dict(size=10), **axis_labels(int(rows[0]), int(rows[-1]), texts)))
    return figure


def distance_label(low: int, high: int) -> str:
    return str(low) if high - low == 1 else f"{low}–{high - 1}"


def profile_figure(profile: HeadProfile, weighting: str = "attention") -> go.Figure:
    """Attention mass (value-weighted with ``weighting`` ``"value"``) against query-key distance, one bar per log
    bin."""
    edges = profile.distance_edges
    labels = [distance_label(int(low), int(high)) for low, high in zip(edges[:-1], edges[1:])]
    figure = go.Figure(go.Bar(x=labels, y=profile.distance_mass, marker_color="#4a98c9",
                              hovertemplate="distance %{x}: %{y:.3f}<extra></extra>"))
    figure.update_layout(width=380, height=300, margin=dict(l=50, r=10, t=40, b=60),
                         title=dict(text=f"{'value-weighted' if weighting == 'value' else 'attention'} mass by "
                                         "distance |query − key|", font=dict(size=13)),
                         xaxis=dict(title="distance (tokens, log bins)", type="category", tickangle=-45),
                         yaxis=dict(title="mean weight", rangemode="tozero"), plot_bgcolor="white")
    return figure


def scores_table(profile: HeadProfile, repeat: RepeatedSpan | None) -> html.Table:
    """The head's scores over the document, each a mean over its queries."""
    if profile.induction is None:
        induction = "no repeated passage in this document"
    else:
        induction = (f"{profile.induction:.3f} over {profile.n_induction:,} queries of a passage repeated "
                     f"{repeat.offset:,} tokens later")
    rows = [("first token", f"{profile.first_token:.3f}"), ("special tokens", f"{profile.special_tokens:.3f}"),
            ("previous token", f"{profile.previous_token:.3f}"), (INDUCTION.name, induction)]
    return html.Table(className="document-scores", children=[
        html.Tr([html.Th(name, style={"textAlign": "left", "paddingRight": "8px"}), html.Td(value)])
        for name, value in rows])


def token_strip(tokens: np.ndarray, rows: tuple[int, int], columns: tuple[int, int]) -> list:
    """The tokens of the region on screen: its keys, then its queries (the first :data:`STRIP_TOKENS` of each)."""
    def line(name: str, start: int, stop: int) -> html.Div:
        shown = min(stop, start + STRIP_TOKENS)
        rest = [html.Span(f" … {stop - shown:,} more (zoom in)", className="hint")] if stop > shown else []
        return html.Div(className="strip-line", children=[
            html.B(f"{name} {start}–{stop - 1}: ", className="strip-range"),
            *(html.Span(str(tokens[p]), title=str(p), className="strip-token",
                        style={"borderRight": "1px solid #ddd", "padding": "0 1px"}) for p in range(start, shown)),
            *rest])
    return [line("keys", *columns), line("queries", *rows)]
