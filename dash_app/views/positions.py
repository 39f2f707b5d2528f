"""Positions view: every head's average attention by relative position (the head atlas), one row per head.

The figure is :func:`qkviz.report.relative_position_figure`, the report's: row ``r`` is the
flat head ``r`` (``layer * n_heads + head``), so a click on a cell opens that row's head
(``heatmapRowEvent`` in ``assets/clientside.js`` relays the row's index, found by its name, never by a
float). :func:`register` adds the callback that draws it and that relay.
"""

from __future__ import annotations

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.state.events import open_clicked_head, relay_graph_event
from dash_app.export import export_buttons, image_config
from dash_app.figure_parts import message_figure
from dash_app.panels.atlas import missing_atlas_message
from dash_app.data.run_data import RunData
from dash_app.state.view_state import checked_state
from dash_app.state.view_registry import AppContext, View, register_view
from qkviz.report import relative_position_figure


def layout(_context: AppContext) -> html.Div:
    return html.Div(id=ids.POSITIONS_VIEW, style={"display": "none"}, children=[
        html.Div(className="controls", children=[
            html.Span("Mean attention at each offset (key position − query position) over the corpus, one row per "
                      "head, grouped by layer; colour on a log scale. Click a row to open that head.",
                      className="hint"),
            export_buttons(ids.POSITIONS_GRAPH, "positions"),
        ]),
        html.Div(id=ids.POSITIONS_MESSAGE, className="message"),
        dcc.Graph(id=ids.POSITIONS_GRAPH, config=image_config("positions", responsive=False),
                  figure={"data": [], "layout": {"height": 100}}),
    ])


def render_positions(data: RunData) -> tuple[go.Figure, str]:
    """The heatmap of the run's atlas and an empty message, or an empty figure and the message naming
    ``qkviz stats``."""
    atlas = data.atlas()
    if atlas is None:
        return message_figure(), missing_atlas_message(data)
    figure = relative_position_figure(atlas.relative_position, atlas.offsets)
    figure.update_layout(title={"text": f"{data.name}: average attention by relative position", "font": {"size": 14}},
                         margin={"t": 40}, hovermode="closest")
    return figure, ""


def register(app: dash.Dash, context: AppContext) -> None:
    """Draw the heatmap when the view opens or its run or head atlas changes; relay a row's click."""
    runs = context.runs

    @app.callback(Output(ids.POSITIONS_GRAPH, "figure"), Output(ids.POSITIONS_MESSAGE, "children"),
                  Output(ids.POSITIONS_RENDERED, "data"), Input(VIEW.state_store, "data"),
                  State(ids.POSITIONS_RENDERED, "data"), prevent_initial_call=True)
    def draw_positions(current, rendered):
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        data = runs[state.run]
        key = [state.run, data.atlas_stamp()]
        if key == rendered:
            raise PreventUpdate
        figure, message = render_positions(data)
        return figure, message, key

    relay_graph_event(app, "heatmapRowEvent", ids.POSITIONS_GRAPH, "clickData", ids.POSITIONS_CLICK)


VIEW = register_view(View(
    name="positions", label="Positions", order=40, layout=layout, register=register,
    stores=(ids.POSITIONS_RENDERED, ids.POSITIONS_CLICK), actions={(ids.POSITIONS_CLICK, "data"): open_clicked_head}))
