"""Heads view: a map of every head of the model, one point per head, from ``qkviz related``.

The map is :attr:`qkviz.analysis.HeadSimilarity.map_xy`, classical MDS of the heads' mean
Jensen-Shannon distance: heads that attend alike lie close. Points are coloured by layer, or by the
head atlas's pattern label when the run has one; hover names the head, its label and its nearest head.
Every point carries its flat head index (``layer * n_heads + head``) as ``customdata``, so a click
opens that head through the same point event as the matrix view. The open head is ringed.
:func:`register` adds the callback that draws it and the clientside relay of a click.
"""

from __future__ import annotations

import dash
import numpy as np
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.state.events import open_clicked_head
from dash_app.export import export_buttons, image_config
from dash_app.figure_parts import BLANK_FIGURE, message_figure
from dash_app.panels.atlas import missing_atlas_message
from dash_app.panels.related import missing_related_message
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState, checked_state
from dash_app.state.view_registry import AppContext, View, register_view
from qkviz.analysis.labels import LABEL_COLOURS
from qkviz.analysis import LABELS
from qkviz.analysis import HeadSimilarity

COLOURINGS = {"layer": "layer", "label": "strongest label (head atlas)"}
NO_LABEL = "no atlas row"
#: the figure's height: the window's, less the bars above it
GRAPH_HEIGHT = "calc(100vh - 190px)"
MIN_HEIGHT_PX = 480
#: up to this many heads every point is named beside it; past it only the heads standing apart (hover names all)
NAMED_HEADS = 150
#: a head stands apart when no other lies within this share of the map's larger extent (a name's width, about)
APART = 0.04


def layout(_context: AppContext) -> html.Div:
    return html.Div(id=ids.HEADS_VIEW, style={"display": "none"}, children=[
        html.Div(className="controls", children=[
            html.Label("Colour by"),
            dcc.RadioItems(id=ids.HEADS_COLOUR, options=colour_options(True), value="layer", inline=True),
            html.Span("One point per head; heads that attend alike (low Jensen-Shannon distance on the same "
                      "queries) lie close. Click a head to open it.", className="hint"),
            export_buttons(ids.HEADS_GRAPH, "heads"),
        ]),
        html.Div(id=ids.HEADS_MESSAGE, className="message"),
        dcc.Graph(id=ids.HEADS_GRAPH, config=image_config("heads"),
                  style={"height": GRAPH_HEIGHT, "minHeight": f"{MIN_HEIGHT_PX}px"}, figure=BLANK_FIGURE),
    ])


def colour_options(has_atlas: bool) -> list[dict]:
    """The colour control's options; colouring by label needs the head atlas."""
    return [{"label": text, "value": value, "disabled": value == "label" and not has_atlas}
            for value, text in COLOURINGS.items()]


def head_names(n_layers: int, n_heads: int) -> list[str]:
    return [f"L{flat // n_heads} H{flat % n_heads}" for flat in range(n_layers * n_heads)]


def head_label_names(data: RunData) -> list[str] | None:
    """Per flat head, the atlas's pattern label (:data:`NO_LABEL` for heads it lacks); None without an atlas."""
    atlas = data.atlas()
    if atlas is None:
        return None
    labels = [NO_LABEL] * data.n_total_heads
    for layer, head, label in zip(atlas.table["layer"], atlas.table["head"], atlas.table["label"]):
        labels[int(layer) * data.run.n_heads + int(head)] = str(label)
    return labels


def hover_texts(similarity: HeadSimilarity, names: list[str], labels: list[str] | None) -> list[str]:
    """``"L3 H5 · first-token · nearest L2 H1 (JS 0.123)"`` per flat head."""
    distances = similarity.js_distance + np.diag(np.full(len(names), np.inf))
    nearest = np.argmin(distances, axis=1)
    texts = []
    for flat, name in enumerate(names):
        parts = [name] + ([labels[flat]] if labels is not None else [])
        if len(names) > 1:
            parts.append(f"nearest {names[nearest[flat]]} (JS {similarity.js_distance[flat, nearest[flat]]:.3f})")
        texts.append(" · ".join(parts))
    return texts


def named_heads(xy: np.ndarray) -> np.ndarray:
    """bool ``[head]``: the heads whose name is written beside their point: all of up to :data:`NAMED_HEADS`,
    else those with no other head within :data:`APART` of the map's extent (names in a crowd overlap)."""
    if len(xy) <= NAMED_HEADS:
        return np.ones(len(xy), dtype=bool)
    extent = float(np.ptp(xy, axis=0).max()) if len(xy) else 0.0
    gaps = np.sqrt(((xy[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2))
    np.fill_diagonal(gaps, np.inf)
    return gaps.min(axis=1) > APART * extent


def heads_figure(similarity: HeadSimilarity, names: list[str], hover: list[str], labels: list[str] | None,
                 current: int) -> go.Figure:
    """The map: one trace coloured by layer (``labels`` None), or one trace per pattern label (named in the
    legend, above the map, clear of the layer's colour bar); heads named beside their point where names do not
    crowd (:func:`named_heads`); then the ring around the ``current`` flat head."""
    xy = similarity.map_xy
    flat = np.arange(len(xy))
    shown = named_heads(xy)
    written = [name if show else "" for name, show in zip(names, shown)]
    crowded = len(xy) > NAMED_HEADS
    marker = dict(size=7 if crowded else 11, line=dict(color="white", width=0.5 if crowded else 1))
    named = dict(mode="markers+text", textposition="top center", textfont=dict(size=9, color="#444"), hoverinfo="text")
    traces = []
    if labels is None:
        layer = flat // similarity.n_heads
        traces.append(go.Scatter(
            x=xy[:, 0], y=xy[:, 1], customdata=flat, text=written, hovertext=hover, name="heads", **named,
            showlegend=False, marker=dict(marker, color=layer, colorscale="Viridis", cmin=0,
                                          cmax=max(similarity.n_layers - 1, 1), showscale=True,
                                          colorbar=dict(title=dict(text="layer", side="right"), thickness=12,
                                                        dtick=1, x=1.0, xanchor="left"))))
    else:
        present = [label for label in (*LABELS, NO_LABEL) if label in labels]
        for label in present:
            chosen = flat[np.asarray(labels) == label]
            traces.append(go.Scatter(
                x=xy[chosen, 0], y=xy[chosen, 1], customdata=chosen, name=label, text=[written[i] for i in chosen],
                hovertext=[hover[i] for i in chosen], **named,
                marker=dict(marker, color=LABEL_COLOURS.get(label, "#999"))))
    traces.append(go.Scatter(x=xy[[current], 0], y=xy[[current], 1], mode="markers", customdata=[current],
                             hovertext=[hover[current]], hoverinfo="text", name=f"open: {names[current]}",
                             marker=dict(size=20, color="rgba(0,0,0,0)", line=dict(color="#222", width=2))))
    figure = go.Figure(traces)
    axis = dict(showticklabels=False, showgrid=False, zeroline=False, title=None)
    figure.update_layout(
        autosize=True, plot_bgcolor="white", hovermode="closest", margin=dict(l=20, r=20, t=80, b=20),
        title={"text": "Heads by attention similarity (classical MDS of the mean Jensen-Shannon distance)",
               "font": {"size": 14}},
        xaxis=axis, yaxis=dict(axis, scaleanchor="x", scaleratio=1),
        legend=dict(itemclick=False, orientation="h", x=0, y=1.0, yanchor="bottom"), uirevision="heads")
    return figure


def render_heads(data: RunData, state: ViewState, colour: str | None) -> tuple[go.Figure, str, list[dict]]:
    """The map, a message (the command that makes what is missing, or ``""``), and the colour options."""
    labels = head_label_names(data)
    options = colour_options(labels is not None)
    similarity = data.related()
    if similarity is None:
        return message_figure(), missing_related_message(data), options
    message = ""
    if colour == "label" and labels is None:
        message = f"Coloured by layer: {missing_atlas_message(data)}"
    names = head_names(data.run.n_layers, data.run.n_heads)
    hover = hover_texts(similarity, names, labels)
    current = state.layer * data.run.n_heads + state.head
    figure = heads_figure(similarity, names, hover, labels if colour == "label" else None, current)
    return figure, message, options


def register(app: dash.Dash, context: AppContext) -> None:
    """Draw the map when the view opens, its run, similarity, atlas, colour or open head changes."""
    runs = context.runs

    @app.callback(Output(ids.HEADS_GRAPH, "figure"), Output(ids.HEADS_MESSAGE, "children"),
                  Output(ids.HEADS_COLOUR, "options"), Output(ids.HEADS_RENDERED, "data"),
                  Input(VIEW.state_store, "data"), Input(ids.HEADS_COLOUR, "value"), State(ids.HEADS_RENDERED, "data"),
                  prevent_initial_call=True)
    def draw_heads(current, colour, rendered):
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        data = runs[state.run]
        key = [state.run, data.related_stamp(), data.atlas_stamp(), colour, state.layer, state.head]
        if key == rendered:
            raise PreventUpdate
        figure, message, options = render_heads(data, state, colour)
        return figure, message, options, key


VIEW = register_view(View(
    name="heads", label="Heads", order=50, layout=layout, register=register,
    point_events={ids.HEADS_CLICK: (ids.HEADS_GRAPH, "clickData")}, stores=(ids.HEADS_RENDERED,),
    actions={(ids.HEADS_CLICK, "data"): open_clicked_head}))
