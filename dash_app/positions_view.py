"""Positions view: every head's average attention by relative position (the head atlas), one row per head.

The figure is :func:`qkviz.report.position_heatmap.relative_position_figure`, the report's: row ``r`` is the
flat head ``r`` (``layer * n_heads + head``), so a click on a cell opens that row's head
(:data:`ROW_EVENT_JS` relays the row's index, found by its name, never by a float).
"""

from __future__ import annotations

import plotly.graph_objects as go
from dash import dcc, html

from dash_app import ids
from dash_app.atlas_panel import missing_atlas_message
from dash_app.figures import message_figure
from dash_app.run_data import RunData
from qkviz.report import relative_position_figure

#: a heatmap click -> ``{curve, customdata: row index, timestamp}`` (the shape of the point events). dcc.Graph
#: drops a heatmap point's ``[row, column]`` index from its event data, so the row is found from the
#: clicked row's name (``"L1 H2"``, unique) in the trace's rows.
ROW_EVENT_JS = """
function(event) {
    if (!event || !event.points || !event.points.length) { return null; }
    const point = event.points[0];
    const graph = document.querySelector('#%s .js-plotly-plot');
    const trace = graph && graph._fullData && graph._fullData[point.curveNumber];
    const row = trace && trace.y ? Array.from(trace.y).indexOf(point.y) : -1;
    if (row < 0) { return null; }
    return {curve: point.curveNumber, customdata: row, timestamp: Date.now()};
}
""" % ids.POSITIONS_GRAPH


def layout() -> html.Div:
    return html.Div(id=ids.POSITIONS_VIEW, style={"display": "none"}, children=[
        html.Div(className="controls", children=[
            html.Span("Mean attention at each offset (key position − query position) over the corpus, one row per "
                      "head, grouped by layer; colour on a log scale. Click a row to open that head.",
                      className="hint"),
        ]),
        html.Div(id=ids.POSITIONS_MESSAGE, className="message"),
        dcc.Graph(id=ids.POSITIONS_GRAPH, config={"displaylogo": False},
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
