"""Matrix view: every head of the model in one WebGL figure, rows = layers, columns = heads.

Browsers give a page only 8-16 WebGL contexts, so the heads share one ``scattergl`` canvas: each
head's normalised 2D layout is placed in its grid cell, a fixed seeded sample of its tokens drawn
(:meth:`RunData.matrix_sample`). Coordinates are sent as uint16 grid units when they fit (half of
float32's bytes). Every point carries its head's flat index (``layer * n_heads + head``) as
``customdata``, so a click opens that head. Search matches are two more traces over all heads.
How the points are placed and coloured is :mod:`dash_app.views.matrix.points`; the figure is built by
:mod:`dash_app.views.matrix.figure`.
Ordered by a head-atlas column, the cells get a background (one translucent heatmap under the points,
slot 5, on the column's colour scale or the labels' colours) and a badge with the label and value (see
:mod:`dash_app.views.matrix.cells`). A large run's heads are drawn as one image of all their points instead of a
sample (see :mod:`dash_app.views.matrix.raster`): the points' slots are left empty, the cells' heatmap (slot 5) is
invisible where no atlas column colours it, and the figure has no WebGL trace until a search has matches. The
first run's matrix is drawn when the app is built (:func:`first_drawing`), into the page of a visit that opens on
this view (:func:`opened_layout`).
:func:`register` adds the callback that draws it (patching only the search traces when only the search
changed) and the clientside relay of a click.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import dash
import numpy as np
import plotly.graph_objects as go
from dash import ClientsideFunction, Input, Output, Patch, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.data.atlas_columns import LABEL_SORT, sort_options
from dash_app.state.control_options import colour_options, run_changed
from dash_app.state.events import NAMESPACE, open_clicked_head
from dash_app.export import export_buttons
from dash_app.figure_parts import BLANK_FIGURE, CATEGORY_COLOURS, legend_entries, typed_arrays
from dash_app.data.run_data import HeadLayouts, RunData
from dash_app.state.view_state import ViewState, checked_state, initial_state
from dash_app.state.view_registry import AppContext, View, register_view
from dash_app.views.matrix.filter import NO_FILTER, filter_mask
from dash_app.views.matrix.cells import atlas_badges, cell_heatmap, label_legend
from dash_app.views.matrix.figure import grid_margin, head_labels, label_trace, matrix_figure, point_opacity
from dash_app.views.matrix.grid import (MIN_GRAPH_HEIGHT_PX, PAGE_HEIGHT_PX, Box, Grid, list_grid,
                                        model_grid, plot_box, window_size)
from dash_app.views.matrix.points import head_colours, match_traces, place
from dash_app.views.matrix.message import full_message
from dash_app.views.matrix.raster import rasterised, thumbnails_of
from qkviz.analysis import LABELS
from qkviz.report import CATEGORIES, COLOURS

logger = logging.getLogger(__name__)

SORT_OPTIONS = [
    {"label": "layer / head order", "value": "order"},
    {"label": "distance-dot correlation (report)", "value": "correlation"},
    {"label": "search clusters (fewest first)", "value": "clusters"},
    {"label": "related heads (attention clusters)", "value": "related"},
]
#: the figure's height: the window's, less the bars above it (matrix_grid fits the grid to it)
GRAPH_HEIGHT = f"calc(100vh - {PAGE_HEIGHT_PX}px)"


def layout(_context: AppContext) -> html.Div:
    """The view as a page that opens on another view gets it: the graph empty, drawn by its callback when the
    view first shows."""
    return container(BLANK_FIGURE, None, None)


def opened_layout(context: AppContext) -> html.Div:
    """The view as a page that opens on it gets it: with :func:`first_drawing` (see the shell's
    :func:`~dash_app.app.requested_view`)."""
    return container(*first_drawing(context.runs))


def container(figure, message: str | None, key: list | None) -> html.Div:
    """The view's container, its graph showing ``figure``, its message line ``message`` and its drawing key
    ``key`` (:func:`drawing_key`; None: nothing drawn yet)."""
    return html.Div(id=ids.MATRIX_VIEW, children=[
        dcc.Store(id=ids.MATRIX_RENDERED, data=key),
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
        html.Div(className="controls", children=[
            html.Label("Filter heads by"),
            dcc.Dropdown(id=ids.MATRIX_FILTER, options=NO_FILTER, value="", clearable=False, style={"width": "320px"}),
            html.Label("from"),
            dcc.Input(id=ids.MATRIX_FILTER_MIN, type="number", debounce=True, placeholder="lowest", style={"width": "90px"}),
            html.Label("to"),
            dcc.Input(id=ids.MATRIX_FILTER_MAX, type="number", debounce=True, placeholder="highest", style={"width": "90px"}),
            dcc.Dropdown(id=ids.MATRIX_FILTER_LABELS, multi=True, placeholder="labels to keep", value=[],
                         style={"minWidth": "220px"}),
            dcc.RadioItems(id=ids.MATRIX_FILTER_MODE, value="dim", inline=True,
                           options=[{"label": "fade the others", "value": "dim"},
                                    {"label": "hide them", "value": "hide"}]),
        ]),
        html.Div(id=ids.MATRIX_MESSAGE, className="message", children=message),
        dcc.Graph(id=ids.MATRIX_GRAPH, config={"displayModeBar": False, "scrollZoom": False, "responsive": True},
                  style={"height": GRAPH_HEIGHT, "minHeight": f"{MIN_GRAPH_HEIGHT_PX}px"}, figure=figure),
    ])


def first_drawing(runs: list[RunData]) -> tuple[go.Figure | dict, str | None, list | None]:
    """The figure, message and drawing key (:func:`drawing_key`) of the matrix a page without a query opens on: the
    first run's, in the default window. Drawn when the app is built, and only for a run whose heads are one image
    (cheap to keep in the page): a page that opens on this view (:func:`opened_layout`) draws it as soon as Plotly
    is loaded, without waiting for the matrix's callback, which finds it drawn (or draws it again where the window,
    the state or the layouts differ). An empty figure for other runs, or when it cannot be drawn (logged; the
    callback draws it then)."""
    if not runs or not rasterised(runs[0]):
        return BLANK_FIGURE, None, None
    data = runs[0]
    state = initial_state(data.shape)
    try:
        figure, message = render_matrix(data, state, None, None)
    except Exception:  # noqa: BLE001 -- an optimisation of the first load: the callback draws it, or says what failed
        logger.exception("could not draw %s's matrix ahead of the first page", data.name)
        return BLANK_FIGURE, None, None
    return figure, message, drawing_key(data, state, None)


def drawing_key(data: RunData, state: ViewState, viewport) -> list:
    """What a drawn matrix depends on (the callback draws again only when it changes): the state's parts the matrix
    shows, the atlas's or related heads' stamp where the order uses them, the layouts missing and standing in, the
    window and the filter."""
    layouts = data.all_layouts(state.method)
    atlas = state.sort in data.atlas_sorts() or bool(state.filter_by)
    return [state.run, state.method, state.dim, state.search.strip().lower(), state.substring, state.sort, state.colour,
            data.atlas_stamp() if atlas else data.related_stamp() if state.sort == "related" else None,
            [len(layouts.missing), len(layouts.stand_in)], list(window_size(viewport)),
            [state.filter_by, state.filter_min, state.filter_max, list(state.filter_labels), state.filter_mode]]


def head_order(values: np.ndarray, ascending: bool = True) -> np.ndarray:
    """int64 ``[head]``: the flat head shown at each grid position, by ``values`` (NaN last, stable)."""
    values = np.asarray(values, dtype=np.float64)
    keyed = np.where(np.isnan(values), np.inf, values if ascending else -values)
    return np.argsort(keyed, kind="stable")


def sort_control_options(data: RunData) -> list[dict]:
    """The order control's options: the fixed orders, then the run's head-atlas columns (if any)."""
    return SORT_OPTIONS + sort_options(data.atlas_sorts())


def in_model_order(order: np.ndarray, kept: np.ndarray | None, hide: bool) -> bool:
    """Whether every head is drawn in model order (a model grid, its axes naming layers and heads)."""
    return not (hide and kept is not None) and np.array_equal(order, np.arange(len(order)))


def fitted_grid(data: RunData, order: np.ndarray, kept: np.ndarray | None, hide: bool, box: Box) -> Grid:
    """The grid for ``box``: the model grid in model order (layers and heads on the axes), else the heads shown
    (``order``, less those a hiding filter leaves out) row by row; with room for the cells' text when they are
    large enough to write it."""
    n_layers, n_heads = data.run.n_layers, data.run.n_heads
    if in_model_order(order, kept, hide):
        grid = model_grid(n_layers, n_heads, box)
        return model_grid(n_layers, n_heads, box, text_lines=1) if grid.shows_text() else grid
    shown = order if not (hide and kept is not None) else order[kept[order]]
    grid = list_grid(shown, len(order), box)
    return list_grid(shown, len(order), box, text_lines=2) if grid.shows_text() else grid


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


@dataclass(frozen=True)
class MatrixParts:
    """What a drawing of the matrix and a search's patch of it share: the grid order, labels, correlations and
    cell values (:func:`head_figures`), the heads a filter keeps, the legend, margins and the grid."""

    order: np.ndarray
    labels: list[str]
    correlations: np.ndarray | None
    cell_values: np.ndarray | None
    kept: np.ndarray | None
    legend: list
    margin: dict
    grid: Grid


def matrix_parts(data: RunData, state: ViewState, clusters: np.ndarray | None, viewport=None) -> MatrixParts:
    """The grid for ``state`` in the browser's window ``viewport`` (``{width, height}``, checked here)."""
    order, labels, correlations, cell_values = head_figures(data, state, clusters)
    kept = filter_mask(data, state)
    hide = state.filter_mode == "hide"
    legend = []
    if state.colour in CATEGORIES:
        names = CATEGORIES[state.colour]
        legend += legend_entries(names, CATEGORY_COLOURS[:len(names)], go.Scatter if rasterised(data) else go.Scattergl,
                                 title=f"{COLOURS[state.colour]}:")
    if cell_values is not None and state.sort == LABEL_SORT:
        legend += label_legend(cell_values)
    continuous = state.colour != "type" and state.colour not in CATEGORIES
    shows_legend = bool(legend) or (rasterised(data) and state.colour == "type")
    cell_bar = cell_values is not None and state.sort != LABEL_SORT
    window = window_size(viewport)
    margin = grid_margin(in_model_order(order, kept, hide), shows_legend, cell_bar, continuous)
    grid = fitted_grid(data, order, kept, hide, plot_box(window, margin))
    return MatrixParts(order, labels, correlations, cell_values, kept, legend, margin, grid)


def render_matrix(data: RunData, state: ViewState, clusters: np.ndarray | None, matches: np.ndarray | None,
                  viewport=None) -> tuple[go.Figure, str]:
    """The matrix figure and message for ``state`` in the browser's window ``viewport`` (the callback's work,
    without Dash)."""
    layouts = data.all_layouts(state.method)
    parts = matrix_parts(data, state, clusters, viewport)
    grid, kept = parts.grid, parts.kept
    cells = (cell_heatmap(grid, parts.labels, parts.cell_values, state.sort, kept)
             if parts.cell_values is not None else None)
    sample, sheet, value_range = data.matrix_sample(), None, None
    if rasterised(data):
        cache = thumbnails_of(data)
        sheet = cache.sheet(state.method, state.colour, grid, kept, layouts.stand_in)
        value_range = cache.value_range(state.colour) if state.colour != "type" and state.colour not in CATEGORIES else None
    figure = matrix_figure(layouts.points, sample, grid, parts.labels, drawn_matches(data, matches), cells,
                           head_colours(data, state.colour) if sheet is None else None, state.colour,
                           list(parts.legend), sheet, value_range, kept, parts.margin)
    return figure, full_message(data, state, parts.correlations, parts.kept, clusters, matches)


def search_patch(data: RunData, state: ViewState, clusters: np.ndarray | None, matches: np.ndarray | None,
                 viewport=None) -> tuple[Patch, str]:
    """Only what a new search changes in a drawn matrix (same run, method, window, filter and an order that does
    not depend on the search): the match traces, the labels' badges, the cells' hover and the points' opacity;
    and the message line, which explains the new badges."""
    parts = matrix_parts(data, state, clusters, viewport)
    layouts = data.all_layouts(state.method)
    searching = matches is not None and len(matches) > 0
    patch = Patch()
    for slot, trace in enumerate(match_traces(layouts.points, parts.grid, drawn_matches(data, matches),
                                              rasterised(data)), start=2):
        patch["data"][slot] = typed_arrays(trace.to_plotly_json())
    if not rasterised(data):                 # sampled points dimmed under the matches (images are left as drawn)
        sample = data.matrix_sample()
        for slot in (0, 1):
            _, _, head = place(layouts.points, parts.grid, sample, slot == 1)
            opacity = point_opacity(head, parts.kept, searching)
            patch["data"][slot]["marker"]["opacity"] = (typed_arrays({"o": opacity})["o"]
                                                        if isinstance(opacity, np.ndarray) else opacity)
    labels = label_trace(parts.grid, parts.labels, parts.kept)
    patch["data"][4]["text"] = list(labels.text)
    patch["data"][4]["hovertext"] = list(labels.hovertext)
    patch["data"][5]["text"] = cell_heatmap(parts.grid, parts.labels).text
    return patch, full_message(data, state, parts.correlations, parts.kept, clusters, matches)


def opened_or_run_changed(state: ViewState, previous: ViewState | None) -> bool:
    """Whether the action showed another run or opened the view (the atlas may have appeared meanwhile)."""
    return run_changed(state, previous) or (state.view == VIEW.name and (previous is None or previous.view != VIEW.name))


def sort_options_sent(data: RunData, state: ViewState, previous: ViewState | None):
    """The order control's options: the atlas's columns, which may appear while the app runs, sent when the run
    changes or the view opens, not on every action."""
    return sort_control_options(data) if opened_or_run_changed(state, previous) else no_update


def filter_options_sent(data: RunData, state: ViewState, previous: ViewState | None):
    """The filter control's options: none, then the atlas's label and numeric columns."""
    return NO_FILTER + sort_options(data.atlas_sorts()) if opened_or_run_changed(state, previous) else no_update


def filter_label_options_sent(data: RunData, state: ViewState, previous: ViewState | None):
    """The labels the filter can keep: those the run's heads earn (or have as their strongest), in the rules' order."""
    if not opened_or_run_changed(state, previous):
        return no_update
    atlas = data.atlas()
    present = set(atlas.table.label) | set(atlas.labels.label) if atlas is not None else set()
    return [{"label": label, "value": label} for label in LABELS if label in present]


def register(app: dash.Dash, context: AppContext) -> None:
    """Draw the matrix when the view opens or its run, projection, search or order changes."""
    runs, searches = context.runs, context.searches

    @app.callback(Output(ids.MATRIX_GRAPH, "figure"), Output(ids.MATRIX_MESSAGE, "children"),
                  Output(ids.MATRIX_RENDERED, "data"), Input(VIEW.state_store, "data"), Input(VIEW.layout_stamp, "data"),
                  Input(ids.MATRIX_VIEWPORT, "data"), State(ids.MATRIX_RENDERED, "data"), prevent_initial_call=True)
    def draw_matrix(current, _landed, viewport, rendered):
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        data = runs[state.run]
        layouts = data.all_layouts(state.method)      # heads that landed since the last drawing are read here
        key = drawing_key(data, state, viewport)
        rendered = rendered if isinstance(rendered, list) and len(rendered) == len(key) else None   # ours, or nothing
        if key == rendered:
            raise PreventUpdate
        search = searches[state.run]
        matches = search.matches(state.search, state.substring)
        clusters = (search.clusters(state.search, state.substring, state.method, len(layouts.missing))
                    if matches is not None else None)
        if rendered and rendered[:3] + rendered[5:] == key[:3] + key[5:] and state.sort != "clusters":
            # only the search changed: send the matches and badges, not every head's points again
            patch, message = search_patch(data, state, clusters, matches, viewport)
            return patch, message, key
        figure, message = render_matrix(data, state, clusters, matches, viewport)
        return figure, message, key

    app.clientside_callback(ClientsideFunction(NAMESPACE, "matrixViewport"), Output(ids.MATRIX_VIEWPORT, "data"),
                            Input(VIEW.state_store, "data"), State(ids.MATRIX_VIEWPORT, "id"),
                            State(ids.MATRIX_VIEWPORT, "data"))


VIEW = register_view(View(
    name="matrix", label="Matrix", order=10, layout=layout, register=register, opened_layout=opened_layout,
    point_events={ids.MATRIX_CLICK: (ids.MATRIX_GRAPH, "clickData")}, stores=(ids.MATRIX_VIEWPORT,),
    actions={(ids.MATRIX_CLICK, "data"): open_clicked_head},
    controls={ids.MATRIX_SORT: "sort", ids.MATRIX_FILTER: "filter_by", ids.MATRIX_FILTER_MIN: "filter_min",
              ids.MATRIX_FILTER_MAX: "filter_max", ids.MATRIX_FILTER_LABELS: "filter_labels",
              ids.MATRIX_FILTER_MODE: "filter_mode"},
    repeats={ids.MATRIX_COLOUR: "colour"},
    options={ids.MATRIX_SORT: sort_options_sent, ids.MATRIX_COLOUR: colour_options,
             ids.MATRIX_FILTER: filter_options_sent, ids.MATRIX_FILTER_LABELS: filter_label_options_sent}))
