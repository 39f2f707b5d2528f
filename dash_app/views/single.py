"""Single-head view: one head's queries and keys in a WebGL scatter (2D) or a 3D scatter.

Arrays go to Plotly as numpy (float32 coordinates and colours, int32 ``customdata``), which
Plotly serialises as typed arrays (base64), not lists. ``customdata`` is the point's index in the
head's joint layout (query ``t`` is ``t``, key ``t`` is ``n_tokens + t``); hover shows the token,
and the detail panel (a hover callback) its sentence, position and colour value.

Traces sit in fixed slots so a click can replace only the overlays (a ``Patch``): 0 queries,
1 keys, 2 / 3 search matches (queries / keys), 4 / 5 the clicked point's sentence (queries /
keys), 6 .. 6 + OPACITY_STEPS - 1 attention lines by opacity step, then the clicked point, then its
corpus-wide partners (:mod:`dash_app.panels.partners`).

Beside the figure, the side panels of :mod:`dash_app.panels` (head atlas, corpus partners, related heads).
:func:`register` adds the callbacks that draw the figure and fill the panels, and the clientside
relays of clicks and hovers.
"""

from __future__ import annotations

import dash
import numpy as np
import plotly.graph_objects as go
from dash import ClientsideFunction, Input, Output, Patch, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.events import NAMESPACE, clicked, relay_point_events
from qkviz.report import CATEGORIES, COLOURS, colour_ticks, colour_title, colour_values, describe_value
from dash_app.export import export_buttons, image_config
from dash_app.figures import (CATEGORY_COLOURS, KEY_COLOUR, KEY_MATCH_COLOUR, KEY_SCALE, LINE_COLOUR, MATCH_RING,
                              OPACITY_STEPS, QUERY_COLOUR, QUERY_MATCH_COLOUR, QUERY_SCALE, category_marker,
                              legend_entries, message_figure, opacity_step, step_opacity)
from dash_app.panels import atlas as atlas_panel
from dash_app.panels import partners as partners_panel
from dash_app.panels import related as related_panel
from dash_app.panels import selection as selection_panel
from dash_app.run_data import METHOD_LABELS, RunData
from dash_app.search import TokenSearch
from dash_app.state import ViewState, bounded_number, checked_state, string_list
from qkviz import QkvizError

OVERLAY_SLOTS = slice(4, 4 + 2 + OPACITY_STEPS + 2)
PARTNER_COLOUR = "#ff7f00"
OPTIONS = [{"label": "size by norm", "value": "size"}, {"label": "token labels (when zoomed in)", "value": "labels"}]
#: token labels are drawn only while at most this many points are in view (zoom in to see them)
LABEL_LIMIT = 300
#: the figure's height: the window's, less the bars above it (at least MIN_HEIGHT_PX)
GRAPH_HEIGHT = "calc(100vh - 195px)"
MIN_HEIGHT_PX = 480
#: the part of the cloud the 3D axes' range spans (quantiles of each axis, then a margin); the few points
#: beyond (outliers that would shrink the cloud to a corner of its box) are left out of view, never dropped
CLOUD_QUANTILES = (0.005, 0.995)
CLOUD_MARGIN = 0.08
DEFAULT_TOP_K = 5
MAX_TOP_K = 50
DEFAULT_THRESHOLD = 0.02
EXCERPT_CHARS = 60
KIND = ("query", "key")
NO_POINT = "Click a point: its token, sentence and attention show here."
#: colour features whose scale is fixed (the same colour means the same value from head to head, run to run)
FIXED_RANGES = {"position": (0.0, 1.0)}
#: marker symbols of queries and keys when colour tells categories apart
SYMBOLS = ("circle", "diamond")
NO_MATCHES = np.zeros(0, dtype=np.int64)
#: store -> (graph, event) relayed by ``pointEvent`` (see :mod:`dash_app.events`)
POINT_EVENTS = {ids.SINGLE_CLICK: (ids.SINGLE_GRAPH, "clickData"),
                ids.SINGLE_HOVER_POINT: (ids.SINGLE_GRAPH, "hoverData")}


def layout() -> html.Div:
    button = lambda id_, text, title: html.Button(text, id=id_, title=title, n_clicks=0)  # noqa: E731
    return html.Div(id=ids.SINGLE_VIEW, style={"display": "none"}, children=[
        html.Div(className="controls", children=[
            html.Label("Layer"), dcc.Dropdown(id=ids.LAYER_SELECT, clearable=False, style={"width": "90px"}),
            html.Label("Head"), dcc.Dropdown(id=ids.HEAD_SELECT, clearable=False, style={"width": "90px"}),
            button(ids.PREV_HEAD, "◀ head", "previous head"), button(ids.NEXT_HEAD, "head ▶", "next head"),
            button(ids.LAYER_UP, "▲ layer", "one layer up"), button(ids.LAYER_DOWN, "layer ▼", "one layer down"),
            export_buttons(ids.SINGLE_GRAPH, "single-head"),
            html.Label("Colour"),
            dcc.Dropdown(id=ids.COLOUR_SELECT, clearable=False, style={"width": "250px"},
                         options=[{"label": label, "value": value} for value, label in COLOURS.items()]),
            dcc.Checklist(id=ids.SINGLE_OPTIONS, options=OPTIONS, value=[], inline=True),
            html.Label("lines: top"),
            dcc.Input(id=ids.TOP_K, type="number", min=1, max=MAX_TOP_K, step=1, value=DEFAULT_TOP_K, style={"width": "55px"}),
            html.Label("weight ≥"),
            dcc.Input(id=ids.THRESHOLD, type="number", min=0, max=1, step=0.01, value=DEFAULT_THRESHOLD,
                      style={"width": "70px"}),
        ]),
        html.Div(id=ids.SINGLE_INFO, className="info"),
        html.Div(id=ids.SINGLE_MESSAGE, className="message"),
        html.Div(className="single-body", children=[
            dcc.Graph(id=ids.SINGLE_GRAPH, config=image_config("single-head", **selection_panel.SELECT_TOOLS),
                      clear_on_unhover=True,
                      style={"flex": "1 1 auto", "minWidth": "0", "height": GRAPH_HEIGHT, "minHeight": f"{MIN_HEIGHT_PX}px"},
                      figure={"data": [], "layout": {}}),
            dcc.Store(id=ids.SINGLE_LABELS_SINK),
            html.Div(className="side-panel", children=[
                html.H4("Clicked point"), html.Div(id=ids.SINGLE_POINT, children=NO_POINT),
                html.Div(id=ids.SINGLE_HOVER, className="hovered"),
                html.H4("Head atlas"), html.Div(id=ids.SINGLE_ATLAS),
                html.Button("Open its sentence ▶", id=ids.OPEN_SENTENCE, n_clicks=0),
                *partners_panel.controls(),
                html.H4("Distance-dot correlation, partner recall@10"), html.Div(id=ids.SINGLE_CORRELATION),
                html.H4("Related heads"), html.Div(id=ids.SINGLE_RELATED),
                *selection_panel.controls(),
            ]),
        ]),
    ])


# -- colours and sizes --------------------------------------------------------------------------
def colour_array(data: RunData, colour: str, layer: int, head: int) -> np.ndarray | None:
    """float32 ``[2 * n_tokens]`` values the colour scale maps (queries then keys); None for query vs key."""
    if colour == "type":
        return None
    if colour == "norm":
        return data.norms(layer, head)
    values = colour_values(data.features[colour].to_numpy(), colour)
    return np.concatenate([values, values])


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
                sizes: np.ndarray | None, labels: bool, matches: np.ndarray) -> list:
    """Slots 0-3: queries, keys and the search matches among them.

    ``coordinates`` ``[2 * n_tokens, dim]``; ``texts`` ``[n_tokens]`` escaped token labels; ``values``
    ``[2 * n_tokens]`` colour values or None; ``sizes`` ``[2 * n_tokens]`` or None; ``matches`` token indices."""
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
        traces.append(_trace(dim, coordinates[rows], name=name, mode=mode, marker=marker, text=texts,
                             customdata=np.arange(rows.start, rows.stop, dtype=np.int32),
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
                   top_k: int, threshold: float, partners: np.ndarray | None = None) -> list[dict]:
    """Slots 4 onwards, as plain dicts: the clicked point's sentence (labelled), lines to the points
    it attends to most (or, for a key, from the queries attending to it most), the point itself, and
    its corpus-wide ``partners`` (joint-layout indices) as stars.

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


# -- the callback's work --------------------------------------------------------------------
def standing_in(data: RunData, state: ViewState) -> bool:
    """Whether the head is drawn in PCA while its own 2D layout is being made in the background."""
    return (state.dim == 2 and not data.is_cached(state.layer, state.head, state.method, 2)
            and data.pending(state.layer, state.head, state.method) and data.is_cached(state.layer, state.head, "pca", 2))


def shown_layout(data: RunData, state: ViewState) -> np.ndarray:
    """The head's layout (its PCA layout while its own is being made); QkvizError saying why it is missing:
    it failed (and how), or the command that makes it."""
    if standing_in(data, state):
        return data.layout(state.layer, state.head, "pca", 2)
    if not data.is_cached(state.layer, state.head, state.method, state.dim):
        failure = data.layout_failure(state.layer, state.head, state.method, state.dim)
        if failure is not None:
            raise QkvizError(f"The {METHOD_LABELS[state.method]} {state.dim}D layout of layer {state.layer} head "
                             f"{state.head} could not be made: {failure}")
    return data.layout(state.layer, state.head, state.method, state.dim)


def layout_note(data: RunData, state: ViewState) -> str:
    """What the message line says of a head drawn in PCA meanwhile ("" otherwise)."""
    if not standing_in(data, state):
        return ""
    return (f"This head's {METHOD_LABELS[state.method]} layout is being made in the background; its PCA layout is "
            "shown until it lands (it then switches in by itself).")


def render_single(data: RunData, state: ViewState, options: list[str], matches: np.ndarray, top_k: int,
                  threshold: float, partners: np.ndarray | None = None) -> go.Figure:
    """The whole single-head figure for ``state``; the run's QkvizError when the layout is not cached."""
    coordinates = shown_layout(data, state)
    values = colour_array(data, state.colour, state.layer, state.head)
    sizes = norm_sizes(data.norms(state.layer, state.head)) if "size" in options else None
    base = base_traces(coordinates, data.display_text, values, state.colour, sizes, "labels" in options, matches)
    overlays = overlay_traces(data, coordinates, state.layer, state.head, state.point, top_k, threshold, partners)
    legend = category_legend(state.colour, state.dim)
    shown = f"PCA (waiting for {METHOD_LABELS[state.method]})" if standing_in(data, state) else METHOD_LABELS[state.method]
    title = f"{data.name} · layer {state.layer} head {state.head} · {shown} {state.dim}D"
    revision = f"{state.run}-{state.layer}-{state.head}-{state.method}-{state.dim}"
    pca = standing_in(data, state) or state.method == "pca"
    return single_figure(base, overlays, state.dim, title, revision, coordinates, legend,
                         ("PC1", "PC2", "PC3") if pca else ("x", "y", "z"))


def info_line(data: RunData) -> str:
    return (f"Based on {data.run.n_tokens:,} tokens ({data.run.n_sentences:,} sentences) of {data.run.model_id}; "
            "queries green, keys pink.")


def point_details(data: RunData, state: ViewState, point: int | None) -> list:
    """The Clicked point panel: token, query or key, sentence excerpt, position, colour value of ``point``
    (a joint-layout index, the state's selected point, the one the URL names and the figure rings)."""
    n_tokens = data.run.n_tokens
    if point is None or not 0 <= point < 2 * n_tokens:
        return [NO_POINT]
    token = point % n_tokens
    row = data.tokens.iloc[token]
    sentence_text = data.sentences.text.iat[int(row.sentence)]
    start, end = int(row.char_start), int(row.char_end)
    if start < 0:
        excerpt = [sentence_text[:2 * EXCERPT_CHARS]]
    else:
        excerpt = [("…" if start > EXCERPT_CHARS else "") + sentence_text[max(0, start - EXCERPT_CHARS):start],
                   html.B(sentence_text[start:end]),
                   sentence_text[end:end + EXCERPT_CHARS] + ("…" if end + EXCERPT_CHARS < len(sentence_text) else "")]
    details = [html.Div([html.B(str(row.token)), f"  ({'key' if point >= n_tokens else 'query'})"]),
               html.Div(f"sentence {int(row.sentence)}, position {int(row.position)}"),
               html.Div(excerpt, className="excerpt")]
    if state.colour != "type":
        value = (data.norms(state.layer, state.head)[point] if state.colour == "norm"
                 else data.features[state.colour].iat[token])
        details.append(html.Div(f"{COLOURS[state.colour]}: {describe_value(state.colour, float(value))}"))
    return details


def hovered_line(data: RunData, point: int | None, selected: int | None) -> str:
    """The line under the panel naming the point under the mouse, when it is not the clicked one."""
    n_tokens = data.run.n_tokens
    if point is None or point == selected or not 0 <= point < 2 * n_tokens:
        return ""
    row = data.tokens.iloc[point % n_tokens]
    return (f"under the mouse: {row.token} ({KIND[int(point >= n_tokens)]}), sentence {int(row.sentence)}, "
            f"position {int(row.position)}")


def correlation_panel(data: RunData, layer: int, head: int):
    """The report's figures for this head (a table), or how to make the report."""
    table = data.correlations()
    if table is None:
        return html.Div(f"No correlation report for this run yet: 'qkviz report --run {data.run.path} --out reports/{data.name}'.")
    rows = table[(table["layer"] == layer) & (table["head"] == head)]
    if rows.empty:
        return html.Div("The report has no figures for this head.")
    header = html.Tr([html.Th(name) for name in ("space", "Pearson", "Spearman", "recall q→k", "recall k→q")])
    body = [html.Tr([html.Td(str(row.space)), html.Td(f"{row.pearson:+.3f}"), html.Td(f"{row.spearman:+.3f}"),
                     *(html.Td(_percent(getattr(row, name, None))) for name in ("recall_query", "recall_key"))])
            for row in rows.itertuples()]
    return html.Table([html.Thead(header), html.Tbody(body)], className="correlations")


def _percent(value) -> str:
    return "–" if value is None or value != value else f"{value:.0%}"


def overlay_patch(data: RunData, state: ViewState, top_k: int, threshold: float, partners: np.ndarray) -> Patch:
    """Only the overlay slots of a drawn figure, for a new clicked point or line settings."""
    coordinates = shown_layout(data, state)
    patch = Patch()
    overlays = overlay_traces(data, coordinates, state.layer, state.head, state.point, top_k, threshold, partners)
    for slot, trace in zip(range(OVERLAY_SLOTS.start, OVERLAY_SLOTS.stop), overlays):
        patch["data"][slot] = trace
    return patch


def register(app: dash.Dash, runs: list[RunData], searches: list[TokenSearch]) -> None:
    """Draw the head (patching only the overlays when only they changed) and its side panels; show the
    hovered point's details; relay clicks and hovers (and the panels' own callbacks and relays)."""

    @app.callback(Output(ids.SINGLE_GRAPH, "figure"), Output(ids.SINGLE_INFO, "children"),
                  Output(ids.SINGLE_MESSAGE, "children"), Output(ids.SINGLE_CORRELATION, "children"),
                  Output(ids.SINGLE_ATLAS, "children"), Output(ids.SINGLE_RENDERED, "data"),
                  Output(ids.SINGLE_RELATED, "children"),
                  Input(ids.STATE, "data"), Input(ids.SINGLE_OPTIONS, "value"), Input(ids.TOP_K, "value"),
                  Input(ids.THRESHOLD, "value"), Input(ids.PARTNER_K, "value"), Input(ids.PARTNER_OPTIONS, "value"),
                  Input(ids.LAYOUT_STAMP, "data"), State(ids.SINGLE_RENDERED, "data"))
    def draw_single(current, options, top_k, threshold, partner_k, partner_options, _landed, rendered):
        state = checked_state(current, runs)
        if state.view != "single":
            raise PreventUpdate
        data = runs[state.run]
        top_k = bounded_number(top_k, DEFAULT_TOP_K, 0, MAX_TOP_K, whole=True)
        threshold = bounded_number(threshold, DEFAULT_THRESHOLD, 0.0, 1.0)
        options, partner_options = string_list(options), string_list(partner_options)
        base_key = [state.run, state.layer, state.head, state.method, state.dim, state.colour,
                    state.search.strip().lower(), state.substring, sorted(options or []), standing_in(data, state),
                    data.is_cached(state.layer, state.head, state.method, state.dim)]
        overlay_key = [state.point, top_k, threshold, partner_k, sorted(partner_options or [])]
        partners = partners_panel.partner_points(data, state, partner_k, partner_options)
        key = {"base": base_key, "overlay": overlay_key}
        rendered = rendered if isinstance(rendered, dict) else None           # ours, or nothing
        if rendered == key:
            raise PreventUpdate
        if rendered and rendered.get("base") == base_key and rendered.get("ok"):
            return (overlay_patch(data, state, top_k, threshold, partners), no_update, no_update, no_update, no_update,
                    {**key, "ok": True}, no_update)
        matches = searches[state.run].matches(state.search, state.substring)
        correlations = correlation_panel(data, state.layer, state.head)
        atlas = atlas_panel.head_panel(data, state.layer, state.head)
        related = related_panel.render_related(data, state.layer, state.head)
        try:
            figure = render_single(data, state, options or [], NO_MATCHES if matches is None else matches,
                                   top_k, threshold, partners)
        except QkvizError as error:
            return message_figure(), info_line(data), str(error), correlations, atlas, {**key, "ok": False}, related
        return figure, info_line(data), layout_note(data, state), correlations, atlas, {**key, "ok": True}, related

    @app.callback(Output(ids.SINGLE_POINT, "children"), Input(ids.STATE, "data"))
    def show_point(current):
        # the state's point: the one the URL names and the figure rings (never the last point hovered)
        state = checked_state(current, runs)
        if state.view != "single":
            raise PreventUpdate
        return point_details(runs[state.run], state, state.point)

    @app.callback(Output(ids.SINGLE_HOVER, "children"), Input(ids.SINGLE_HOVER_POINT, "data"), State(ids.STATE, "data"))
    def show_hover(hover, current):
        state = checked_state(current, runs)
        target = clicked(hover)
        return hovered_line(runs[state.run], None if target is None else target[1], state.point)

    app.clientside_callback(ClientsideFunction(NAMESPACE, "labelsOnZoom"), Output(ids.SINGLE_LABELS_SINK, "data"),
                            Input(ids.SINGLE_GRAPH, "relayoutData"), Input(ids.SINGLE_GRAPH, "figure"),
                            State(ids.SINGLE_OPTIONS, "value"), State(ids.SINGLE_GRAPH, "id"))

    relay_point_events(app, POINT_EVENTS)
    atlas_panel.register(app)
    partners_panel.register(app, runs)
    related_panel.register(app)
    selection_panel.register(app, runs)
