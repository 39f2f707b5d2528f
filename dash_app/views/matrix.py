"""Matrix view: every head of the model in one WebGL figure, rows = layers, columns = heads.

Browsers give a page only 8-16 WebGL contexts, so the heads share one ``scattergl`` canvas: each
head's normalised 2D layout is placed in its grid cell, a fixed seeded sample of its tokens drawn
(:meth:`RunData.matrix_sample`). Coordinates are sent as uint16 grid units when they fit (half of
float32's bytes). Every point carries its head's flat index (``layer * n_heads + head``) as
``customdata``, so a click opens that head. Search matches are two more traces over all heads.
How the points are placed and coloured is :mod:`dash_app.views.matrix_points`.
Ordered by a head-atlas column, the cells get a background (one translucent heatmap under the points,
slot 5, on the column's colour scale or the labels' colours) and a badge with the label and value (see
:mod:`dash_app.views.matrix_cells`). A large run's heads are images of all their points instead of a sample
(see :mod:`dash_app.views.matrix_raster`), slot 0 then an invisible heatmap whose cells a click and hover reach,
and the figure has no WebGL trace until a search has matches.
:func:`register` adds the callback that draws it (patching only the search traces when only the search
changed) and the clientside relay of a click.
"""

from __future__ import annotations

import dash
import numpy as np
import plotly.graph_objects as go
from dash import Input, Output, Patch, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.atlas_columns import LABEL_SORT, sort_options
from dash_app.control_options import colour_options, run_changed
from dash_app.events import open_clicked_head
from dash_app.export import export_buttons
from dash_app.figure_parts import CATEGORY_COLOURS, legend_entries, typed_arrays
from dash_app.panels.related import missing_related_message
from dash_app.run_data import HeadLayouts, RunData
from dash_app.state import ViewState, checked_state
from dash_app.view_registry import AppContext, View, register_view
from dash_app.views.matrix_cells import CELL, INNER, atlas_badges, cell_heatmap, cell_origins, label_legend
from dash_app.views.matrix_points import colour_markers, fits_uint16, head_colours, match_traces, place, raster_extras
from dash_app.views.matrix_raster import click_cells, rasterised, thumbnail_images, thumbnails_of
from qkviz.projection import method_label
from qkviz.report import CATEGORIES, COLOURS

CANVAS_PIXELS = 900_000     # screen area the whole grid aims at (see cell_pixels)
SORT_OPTIONS = [
    {"label": "layer / head order", "value": "order"},
    {"label": "distance-dot correlation (report)", "value": "correlation"},
    {"label": "clusters of the matches' queries and keys (fewest first)", "value": "clusters"},
    {"label": "related heads (attention clusters)", "value": "related"},
]
COLOUR_BAR_PX = 110         # extra width for the colour bar when cells are coloured
POINT_BARS_PX = 70          # extra height under the grid for the points' colour bars (a continuous colouring)
#: the figure's height: the window's, less the bars above it (the grid keeps square cells inside it)
GRAPH_HEIGHT = "calc(100vh - 170px)"
MIN_HEIGHT_PX = 420


def layout(_context: AppContext) -> html.Div:
    return html.Div(id=ids.MATRIX_VIEW, children=[
        html.Div(className="controls", children=[
            html.Label("Order heads by"),
            dcc.Dropdown(id=ids.MATRIX_SORT, options=SORT_OPTIONS, value="order", clearable=False,
                         style={"width": "320px"}),
            html.Label("Colour"),
            dcc.Dropdown(id=ids.MATRIX_COLOUR, clearable=False, style={"width": "250px"},
                         options=[{"label": label, "value": value} for value, label in COLOURS.items()]),
            html.Span("Click a head to open it.", className="hint"),
            export_buttons(ids.MATRIX_GRAPH, "matrix"),
        ]),
        html.Div(id=ids.MATRIX_MESSAGE, className="message"),
        dcc.Graph(id=ids.MATRIX_GRAPH, config={"displayModeBar": False, "scrollZoom": False, "responsive": True},
                  style={"height": GRAPH_HEIGHT, "minHeight": f"{MIN_HEIGHT_PX}px"}, figure={"data": [], "layout": {}}),
    ])


def head_order(values: np.ndarray, ascending: bool = True) -> np.ndarray:
    """int64 ``[head]``: the flat head shown at each grid position, by ``values`` (NaN last, stable)."""
    values = np.asarray(values, dtype=np.float64)
    keyed = np.where(np.isnan(values), np.inf, values if ascending else -values)
    return np.argsort(keyed, kind="stable")


def sort_control_options(data: RunData) -> list[dict]:
    """The order control's options: the fixed orders, then the run's head-atlas columns (if any)."""
    return SORT_OPTIONS + sort_options(data.atlas_sorts())


def head_labels(n_layers: int, n_heads: int, clusters: np.ndarray | None = None,
                correlations: np.ndarray | None = None, badges: list[str] | None = None) -> list[str]:
    """``"L{l} H{h}"`` per flat head, with the cluster count (``"· 3 clusters"``) and correlation (``"r -0.84"``)
    when given, and a second line with the head's badge from ``badges`` ``[flat head]`` when not empty."""
    labels = []
    for flat in range(n_layers * n_heads):
        label = f"L{flat // n_heads} H{flat % n_heads}"
        if clusters is not None and clusters[flat] >= 0:
            label += f" · {clusters[flat]} cluster{'' if clusters[flat] == 1 else 's'}"
        if correlations is not None and not np.isnan(correlations[flat]):
            label += f" · r {correlations[flat]:+.2f}"
        if badges is not None and badges[flat]:
            label += f"<br>{badges[flat]}"
        labels.append(label)
    return labels














def cell_pixels(n_rows: int, n_cols: int) -> int:
    """Screen pixels per cell of a grid near :data:`CANVAS_PIXELS` in area (the label font is chosen by it; the
    figure itself fills its graph's box). The area is that of a 1400 x 900 window's grid, since software
    WebGL (and a browser on a laptop) spends its time filling pixels more than drawing points."""
    return int(np.clip(np.sqrt(CANVAS_PIXELS / (n_rows * n_cols)), 56, 100))






def matrix_figure(points: np.ndarray, sample: np.ndarray, n_layers: int, n_heads: int, order: np.ndarray,
                  labels: list[str], matches: np.ndarray | None = None, cells: go.Heatmap | None = None,
                  values: np.ndarray | None = None, colour: str = "type", legend: list | None = None,
                  thumbnails: list[str | None] | None = None, value_range: tuple[float, float] | None = None
                  ) -> go.Figure:
    """The matrix figure: traces queries, keys, query matches, key matches (all ``scattergl``), labels,
    the cells' background when ``cells`` is given (drawn under the points whatever its slot), then
    ``legend`` (legend-only entries). It fills its graph's box, cells kept square.

    ``points`` ``[flat head, 2 * n_tokens, 2]`` normalised layouts; ``sample`` the token indices
    drawn per head; ``order`` the flat head at each grid position; ``matches`` matched token indices;
    ``values`` ``[flat head, 2 * n_tokens]`` what every head's points are coloured by (:func:`~dash_app.views.matrix_points.head_colours`,
    None: queries green, keys pink), ``colour`` its name.

    With ``thumbnails`` (a PNG data URI per flat head, see :mod:`dash_app.views.matrix_raster`) the heads are
    images instead: slot 0 is the cells' invisible click targets, slot 1 empty, ``sample`` and ``values``
    unused, a continuous colouring's bars span ``value_range``."""
    n_cols, n_rows = n_heads, n_layers
    origins = cell_origins(order, n_rows, n_cols)
    fits = fits_uint16(n_rows, n_cols)
    searching = matches is not None and len(matches) > 0
    traces = []
    if thumbnails is not None:
        traces += [click_cells(order, n_rows, n_cols), go.Scatter(x=[], y=[], name="keys", showlegend=False)]
        legend = (legend or []) + raster_extras(colour, value_range)
    else:
        markers = colour_markers(points, sample, values, colour)
        for (name, keys), marker in zip((("queries", False), ("keys", True)), markers):
            x, y, head = place(points, origins, sample, keys, fits)
            traces.append(go.Scattergl(x=x, y=y, customdata=head, mode="markers", name=name, hoverinfo="none",
                                       marker=dict(marker, size=2.5, opacity=0.25 if searching else 0.6)))
    traces += match_traces(points, origins, matches, fits, thumbnails is not None)
    cell_px = cell_pixels(n_rows, n_cols)
    label_x = origins[:, 0] + INNER[0] - 80
    label_y = origins[:, 1] + CELL - 20
    traces.append(go.Scatter(x=label_x, y=label_y, text=labels, customdata=np.arange(len(labels), dtype=np.uint16),
                             mode="text", textposition="bottom right",
                             textfont=dict(size=10 if cell_px >= 80 else 8, color="#333"),
                             hoverinfo="none", showlegend=False, name="heads"))
    if cells is not None:
        traces.append(cells)
    figure = go.Figure(traces + (legend or []))
    axis = dict(showgrid=True, gridcolor="#d0d0d0", dtick=CELL, tick0=0, showticklabels=False, zeroline=False,
                fixedrange=True)
    bars = colour != "type" and colour not in CATEGORIES and (values is not None or thumbnails is not None)
    cell_bar = cells is not None and cells.showscale is not False
    figure.update_layout(
        autosize=True, margin=dict(l=20, r=20 + (COLOUR_BAR_PX if cell_bar else 0), t=50,
                                   b=20 + (POINT_BARS_PX if bars else 0)),
        xaxis=dict(range=[0, n_cols * CELL], constrain="domain", **axis),
        yaxis=dict(range=[0, n_rows * CELL], scaleanchor="x", scaleratio=1, constrain="domain", **axis),
        plot_bgcolor="white", legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, groupclick="toggleitem"),
        hovermode="closest", uirevision="matrix",
        images=thumbnail_images(thumbnails, order, n_rows, n_cols) if thumbnails is not None else None)
    return figure


def matrix_message(data: RunData, method: str, dim: int, layouts: HeadLayouts) -> str:
    """What the figure does not show, and the command that makes the missing layouts."""
    parts = []
    if dim == 3:
        parts.append(f"The matrix shows the 2D {method} layouts; 3D is in the single-head view.")
    total, name = data.n_total_heads, method_label(method)
    if layouts.stand_in:
        parts.append(f"{len(layouts.stand_in)} of {total} heads are drawn in PCA (marked 'PCA, waiting') until their "
                     f"{name} layout, being made in the background, lands.")
    empty = len(layouts.missing) - len(layouts.stand_in)
    if empty:
        parts.append(f"{empty} of {total} heads have no {name} 2D layout (drawn empty): make them with "
                     f"'qkviz project --run {data.run.path} --method {method} --dim 2'.")
    return " ".join(parts)


def waiting_badges(data: RunData, method: str, layouts: HeadLayouts, badges: list[str] | None) -> list[str] | None:
    """``badges`` with "PCA, waiting" on heads drawn in PCA meanwhile and "failed" on heads whose layout failed."""
    failed = [(layer, head) for layer, head in layouts.missing if data.layout_failure(layer, head, method, 2)]
    if not layouts.stand_in and not failed:
        return badges
    badges = list(badges) if badges is not None else [""] * data.n_total_heads
    for note, heads in (("PCA, waiting", layouts.stand_in), ("layout failed", failed)):
        for layer, head in heads:
            flat = layer * data.run.n_heads + head
            badges[flat] = f"{note} · {badges[flat]}" if badges[flat] else note
    return badges


def head_figures(data: RunData, state: ViewState, clusters: np.ndarray | None
                 ) -> tuple[np.ndarray, list[str], np.ndarray | None, np.ndarray | None]:
    """``(order, labels, correlations, cell values)``: the grid order for ``state.sort``, each head's
    label with its badges, the report's correlation per head (None without a report), and the values
    ``[flat head]`` the cells are coloured by (None unless ordered by a head-atlas column)."""
    correlations, cell_values = None, None
    space = data.correlation_space(state.method)
    if space is not None:
        correlations = data.correlation_grid(space)
    badges = None
    if state.sort == "correlation" and correlations is not None:
        order = head_order(correlations)
    elif state.sort == "clusters" and clusters is not None:
        order = head_order(np.where(clusters < 0, np.nan, clusters))
    elif state.sort == "related" and data.related() is not None:
        order = data.related().order
    elif state.sort in data.atlas_sorts():
        cell_values = data.atlas_grid(state.sort)
        order = head_order(cell_values, ascending=state.sort == LABEL_SORT)
        badges = atlas_badges(data, state.sort)
    else:
        order = np.arange(data.n_total_heads)
    badges = waiting_badges(data, state.method, data.all_layouts(state.method), badges)
    labels = head_labels(data.run.n_layers, data.run.n_heads, clusters,
                         correlations if state.sort == "correlation" else None, badges)
    return order, labels, correlations, cell_values


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
    order, labels, correlations, cell_values = head_figures(data, state, clusters)
    cells = (cell_heatmap(cell_values, order, data.run.n_layers, data.run.n_heads, state.sort)
             if cell_values is not None else None)
    legend = []
    if state.colour in CATEGORIES:
        names = CATEGORIES[state.colour]
        legend += legend_entries(names, CATEGORY_COLOURS[:len(names)], go.Scatter if rasterised(data) else go.Scattergl,
                                 title=f"{COLOURS[state.colour]}:")
    if cells is not None and state.sort == LABEL_SORT:
        legend += label_legend(cell_values)
    sample, thumbnails, value_range = data.matrix_sample(), None, None
    if rasterised(data):
        cache = thumbnails_of(data)
        thumbnails = cache.all(state.method, state.colour, layouts.stand_in)
        value_range = cache.value_range(state.colour) if state.colour != "type" and state.colour not in CATEGORIES else None
    figure = matrix_figure(layouts.points, sample, data.run.n_layers, data.run.n_heads, order, labels,
                           drawn_matches(data, matches), cells,
                           head_colours(data, state.colour) if thumbnails is None else None, state.colour, legend,
                           thumbnails, value_range)
    message = matrix_message(data, state.method, state.dim, layouts)
    if thumbnails is not None:
        message += (f" Each head is an image of all its {2 * data.run.n_tokens:,} points (darker where more fall); "
                    "click a head to see and hover its points.")
    if state.sort == "correlation" and correlations is None:
        message += (" No correlation report for this run yet: make it with "
                    f"'qkviz report --run {data.run.path} --out reports/{data.name}'.")
    if state.sort == "clusters" and clusters is None:
        message += " Search a token to order heads by how many clusters its matches form."
    if state.sort == "related" and data.related() is None:
        message += f" {missing_related_message(data)}"
    return figure, message.strip()


def search_patch(data: RunData, state: ViewState, clusters: np.ndarray | None, matches: np.ndarray | None) -> Patch:
    """Only what a new search changes in a drawn matrix (same run, method and an order that does not
    depend on the search): the match traces, the labels' badges and the other points' opacity."""
    order, labels, _, _ = head_figures(data, state, clusters)
    layouts = data.all_layouts(state.method)
    origins = cell_origins(order, data.run.n_layers, data.run.n_heads)
    fits = fits_uint16(data.run.n_layers, data.run.n_heads)
    searching = matches is not None and len(matches) > 0
    patch = Patch()
    for slot, trace in enumerate(match_traces(layouts.points, origins, drawn_matches(data, matches), fits,
                                              rasterised(data)), start=2):
        patch["data"][slot] = typed_arrays(trace.to_plotly_json())
    if not rasterised(data):                 # sampled points dimmed under the matches (images are left as drawn)
        for slot in (0, 1):
            patch["data"][slot]["marker"]["opacity"] = 0.25 if searching else 0.6
    patch["data"][4]["text"] = labels
    return patch


def sort_options_sent(data: RunData, state: ViewState, previous: ViewState | None):
    """The order control's options: the atlas's columns, which may appear while the app runs, sent when the run
    changes or the view opens, not on every action."""
    opened = state.view == VIEW.name and (previous is None or previous.view != VIEW.name)
    return sort_control_options(data) if run_changed(state, previous) or opened else no_update


def register(app: dash.Dash, context: AppContext) -> None:
    """Draw the matrix when the view opens or its run, projection, search or order changes."""
    runs, searches = context.runs, context.searches

    @app.callback(Output(ids.MATRIX_GRAPH, "figure"), Output(ids.MATRIX_MESSAGE, "children"),
                  Output(ids.MATRIX_RENDERED, "data"), Input(VIEW.state_store, "data"), Input(ids.LAYOUT_STAMP, "data"),
                  State(ids.MATRIX_RENDERED, "data"))
    def draw_matrix(current, _landed, rendered):
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        data = runs[state.run]
        layouts = data.all_layouts(state.method)      # heads that landed since the last drawing are read here
        key = [state.run, state.method, state.dim, state.search.strip().lower(), state.substring, state.sort, state.colour,
               data.atlas_stamp() if state.sort in data.atlas_sorts() else
               data.related_stamp() if state.sort == "related" else None, [len(layouts.missing), len(layouts.stand_in)]]
        rendered = rendered if isinstance(rendered, list) and len(rendered) == len(key) else None   # ours, or nothing
        if key == rendered:
            raise PreventUpdate
        search = searches[state.run]
        matches = search.matches(state.search, state.substring)
        clusters = (search.clusters(state.search, state.substring, state.method, len(layouts.missing))
                    if matches is not None else None)
        if rendered and rendered[:3] + rendered[5:] == key[:3] + key[5:] and state.sort != "clusters":
            # only the search changed: send the matches and badges, not every head's points again
            return search_patch(data, state, clusters, matches), no_update, key
        figure, message = render_matrix(data, state, clusters, matches)
        return figure, message, key


VIEW = register_view(View(
    name="matrix", label="Matrix", order=10, layout=layout, register=register,
    point_events={ids.MATRIX_CLICK: (ids.MATRIX_GRAPH, "clickData")}, stores=(ids.MATRIX_RENDERED,),
    actions={(ids.MATRIX_CLICK, "data"): open_clicked_head},
    controls={ids.MATRIX_SORT: "sort"}, repeats={ids.MATRIX_COLOUR: "colour"},
    options={ids.MATRIX_SORT: sort_options_sent, ids.MATRIX_COLOUR: colour_options}))
