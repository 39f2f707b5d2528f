"""Matrix view: every head of the model in one WebGL figure, rows = layers, columns = heads.

Browsers give a page only 8-16 WebGL contexts, so the heads share one ``scattergl`` canvas: each
head's normalised 2D layout is placed in its grid cell, a fixed seeded sample of its tokens drawn
(:meth:`RunData.matrix_sample`). Coordinates are sent as uint16 grid units when they fit (half of
float32's bytes). Every point carries its head's flat index (``layer * n_heads + head``) as
``customdata``, so a click opens that head. Search matches are two more traces over all heads.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from dash import Patch, dcc, html

from dash_app import ids
from dash_app.figures import KEY_COLOUR, KEY_MATCH_COLOUR, QUERY_COLOUR, QUERY_MATCH_COLOUR
from dash_app.run_data import RunData
from dash_app.state import ViewState

CELL = 1000                 # grid units per cell
INNER = (120, 880)          # where a head's layout lies inside its cell, both axes ...
LABEL_BAND = 60             # ... shifted down by this much, leaving the top for the label
CANVAS_PIXELS = 900_000     # screen area the whole grid aims at (see cell_pixels)
SORT_OPTIONS = [
    {"label": "layer / head order", "value": "order"},
    {"label": "distance-dot correlation (report)", "value": "correlation"},
    {"label": "search clusters (fewest first)", "value": "clusters"},
]


def layout() -> html.Div:
    return html.Div(id=ids.MATRIX_VIEW, children=[
        html.Div(className="controls", children=[
            html.Label("Order heads by"),
            dcc.Dropdown(id=ids.MATRIX_SORT, options=SORT_OPTIONS, value="order", clearable=False,
                         style={"width": "320px"}),
            html.Span("Click a head to open it.", className="hint"),
        ]),
        html.Div(id=ids.MATRIX_MESSAGE, className="message"),
        dcc.Graph(id=ids.MATRIX_GRAPH, config={"displayModeBar": False, "scrollZoom": False},
                  figure={"data": [], "layout": {"height": 100}}),
    ])


def head_order(values: np.ndarray, ascending: bool = True) -> np.ndarray:
    """int64 ``[head]``: the flat head shown at each grid position, by ``values`` (NaN last, stable)."""
    values = np.asarray(values, dtype=np.float64)
    keyed = np.where(np.isnan(values), np.inf, values if ascending else -values)
    return np.argsort(keyed, kind="stable")


def head_labels(n_layers: int, n_heads: int, clusters: np.ndarray | None = None,
                correlations: np.ndarray | None = None) -> list[str]:
    """``"L{l} H{h}"`` per flat head, with the cluster count (``"· 3 cl"``) and correlation (``"r -0.84"``) when given."""
    labels = []
    for flat in range(n_layers * n_heads):
        label = f"L{flat // n_heads} H{flat % n_heads}"
        if clusters is not None and clusters[flat] >= 0:
            label += f" · {clusters[flat]} cl"
        if correlations is not None and not np.isnan(correlations[flat]):
            label += f" · r {correlations[flat]:+.2f}"
        labels.append(label)
    return labels


def cell_origins(order: np.ndarray, n_rows: int, n_cols: int) -> np.ndarray:
    """float64 ``[flat head, 2]``: the lower-left corner of each head's cell (row 0 at the top)."""
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return np.stack([(position % n_cols) * CELL, (n_rows - 1 - position // n_cols) * CELL], axis=1).astype(np.float64)


def place(points: np.ndarray, origins: np.ndarray, tokens: np.ndarray, keys: bool, fits_uint16: bool):
    """Grid coordinates of the given tokens' queries (or keys) in every head.

    ``points`` ``[head, 2 * n_tokens, 2]`` in the unit square; returns ``(x, y, head)`` flat over
    heads, NaN (missing heads) dropped; x and y are uint16 when ``fits_uint16``, else float32."""
    n_tokens = points.shape[1] // 2
    chosen = points[:, tokens + (n_tokens if keys else 0)]                       # [head, m, 2]
    inside = INNER[0] + chosen * (INNER[1] - INNER[0])
    inside[..., 1] -= LABEL_BAND
    placed = origins[:, None, :] + inside
    head = np.repeat(np.arange(len(points), dtype=np.uint16), chosen.shape[1])
    flat = placed.reshape(-1, 2)
    keep = ~np.isnan(flat[:, 0])
    dtype = np.uint16 if fits_uint16 else np.float32
    return np.rint(flat[keep, 0]).astype(dtype), np.rint(flat[keep, 1]).astype(dtype), head[keep]


def cell_pixels(n_rows: int, n_cols: int) -> int:
    """Screen pixels per cell: the canvas is kept near :data:`CANVAS_PIXELS` in area, since software
    WebGL (and a browser on a laptop) spends its time filling pixels more than drawing points."""
    return int(np.clip(np.sqrt(CANVAS_PIXELS / (n_rows * n_cols)), 56, 100))


def _fits_uint16(n_rows: int, n_cols: int) -> bool:
    return max(n_cols, n_rows) * CELL < np.iinfo(np.uint16).max


def match_traces(points: np.ndarray, origins: np.ndarray, matches: np.ndarray | None, fits: bool) -> list:
    """Traces 2 and 3: the matched tokens' queries and keys in every head (empty when not searching)."""
    traces = []
    for name, colour, keys in (("query matches", QUERY_MATCH_COLOUR, False), ("key matches", KEY_MATCH_COLOUR, True)):
        x, y, head = place(points, origins, matches if matches is not None else np.zeros(0, np.int64), keys, fits)
        traces.append(go.Scattergl(x=x, y=y, customdata=head, mode="markers", name=name, hoverinfo="none",
                                   marker=dict(color=colour, size=4, symbol="circle" if not keys else "diamond",
                                               line=dict(color="white", width=0.5))))
    return traces


def matrix_figure(points: np.ndarray, sample: np.ndarray, n_layers: int, n_heads: int, order: np.ndarray,
                  labels: list[str], matches: np.ndarray | None = None) -> go.Figure:
    """The matrix figure: traces queries, keys, query matches, key matches (all ``scattergl``), labels.

    ``points`` ``[flat head, 2 * n_tokens, 2]`` normalised layouts; ``sample`` the token indices
    drawn per head; ``order`` the flat head at each grid position; ``matches`` matched token indices."""
    n_cols, n_rows = n_heads, n_layers
    origins = cell_origins(order, n_rows, n_cols)
    fits = _fits_uint16(n_rows, n_cols)
    searching = matches is not None and len(matches) > 0
    traces = []
    for name, colour, keys in (("queries", QUERY_COLOUR, False), ("keys", KEY_COLOUR, True)):
        x, y, head = place(points, origins, sample, keys, fits)
        traces.append(go.Scattergl(x=x, y=y, customdata=head, mode="markers", name=name, hoverinfo="none",
                                   marker=dict(color=colour, size=2.5, opacity=0.25 if searching else 0.6)))
    traces += match_traces(points, origins, matches, fits)
    cell_px = cell_pixels(n_rows, n_cols)
    label_x = origins[:, 0] + INNER[0] - 80
    label_y = origins[:, 1] + CELL - 20
    traces.append(go.Scatter(x=label_x, y=label_y, text=labels, customdata=np.arange(len(labels), dtype=np.uint16),
                             mode="text", textposition="bottom right",
                             textfont=dict(size=10 if cell_px >= 80 else 8, color="#333"),
                             hoverinfo="none", showlegend=False, name="heads"))
    figure = go.Figure(traces)
    axis = dict(showgrid=True, gridcolor="#d0d0d0", dtick=CELL, tick0=0, showticklabels=False, zeroline=False,
                fixedrange=True)
    figure.update_layout(
        width=cell_px * n_cols + 40, height=cell_px * n_rows + 70, margin=dict(l=20, r=20, t=50, b=20),
        xaxis=dict(range=[0, n_cols * CELL], **axis), yaxis=dict(range=[0, n_rows * CELL], **axis),
        plot_bgcolor="white", legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0), hovermode="closest",
        uirevision="matrix")
    return figure


def matrix_message(data: RunData, method: str, dim: int, missing: tuple) -> str:
    """What the figure does not show, and the command that makes the missing layouts."""
    parts = []
    if dim == 3:
        parts.append(f"The matrix shows the 2D {method} layouts; 3D is in the single-head view.")
    if missing:
        total = data.n_total_heads
        parts.append(f"{len(missing)} of {total} heads have no {method} 2D layout (drawn empty): make them with "
                     f"'qkviz project --run {data.run.path} --method {method} --dim 2'.")
    return " ".join(parts)


def head_figures(data: RunData, state: ViewState, clusters: np.ndarray | None
                 ) -> tuple[np.ndarray, list[str], np.ndarray | None]:
    """``(order, labels, correlations)``: the grid order for ``state.sort``, each head's label with
    its badges, and the report's correlation per head (None without a report)."""
    correlations = None
    space = data.correlation_space(state.method)
    if space is not None:
        correlations = data.correlation_grid(space)
    if state.sort == "correlation" and correlations is not None:
        order = head_order(correlations)
    elif state.sort == "clusters" and clusters is not None:
        order = head_order(np.where(clusters < 0, np.nan, clusters))
    else:
        order = np.arange(data.n_total_heads)
    labels = head_labels(data.run.n_layers, data.run.n_heads, clusters,
                         correlations if state.sort == "correlation" else None)
    return order, labels, correlations


def drawn_matches(data: RunData, matches: np.ndarray | None) -> np.ndarray | None:
    """The matches drawn per head: all of them, or a seeded sample as large as the per-head sample."""
    budget = len(data.matrix_sample())
    if matches is not None and len(matches) > budget:
        return np.sort(np.random.default_rng(0).choice(matches, size=budget, replace=False))
    return matches


def render_matrix(data: RunData, state: ViewState, clusters: np.ndarray | None, matches: np.ndarray | None
                  ) -> tuple[go.Figure, str]:
    """The matrix figure and message for ``state`` (the callback's work, without Dash)."""
    layouts = data.all_layouts(state.method)
    order, labels, correlations = head_figures(data, state, clusters)
    figure = matrix_figure(layouts.points, data.matrix_sample(), data.run.n_layers, data.run.n_heads, order,
                           labels, drawn_matches(data, matches))
    message = matrix_message(data, state.method, state.dim, layouts.missing)
    if state.sort == "correlation" and correlations is None:
        message += (" No correlation report for this run yet: make it with "
                    f"'qkviz report --run {data.run.path} --out reports/{data.name}'.")
    if state.sort == "clusters" and clusters is None:
        message += " Search a token to order heads by how many clusters its matches form."
    return figure, message.strip()


def search_patch(data: RunData, state: ViewState, clusters: np.ndarray | None, matches: np.ndarray | None) -> Patch:
    """Only what a new search changes in a drawn matrix (same run, method and an order that does not
    depend on the search): the match traces, the labels' badges and the other points' opacity."""
    order, labels, _ = head_figures(data, state, clusters)
    origins = cell_origins(order, data.run.n_layers, data.run.n_heads)
    fits = _fits_uint16(data.run.n_layers, data.run.n_heads)
    searching = matches is not None and len(matches) > 0
    patch = Patch()
    for slot, trace in enumerate(match_traces(data.all_layouts(state.method).points, origins,
                                              drawn_matches(data, matches), fits), start=2):
        patch["data"][slot] = trace.to_plotly_json()
    for slot in (0, 1):
        patch["data"][slot]["marker"]["opacity"] = 0.25 if searching else 0.6
    patch["data"][4]["text"] = labels
    return patch
