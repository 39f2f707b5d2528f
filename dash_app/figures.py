"""Figure helpers shared by the views: colours, safe text, empty figures, opacity buckets."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

QUERY_COLOUR = "#1b9e77"    # queries green, keys pink, as in AttentionViz
KEY_COLOUR = "#e7298a"
QUERY_MATCH_COLOUR = "#00441b"
KEY_MATCH_COLOUR = "#67001f"
LINE_COLOUR = "#3f4f8f"
#: queries and keys in two hues of one sequential scale, light (low) to dark (high)
QUERY_SCALE = [[0.0, "#d5efe3"], [0.5, "#41ae76"], [1.0, "#00441b"]]
KEY_SCALE = [[0.0, "#fde0ef"], [0.5, "#de77ae"], [1.0, "#67001f"]]
#: line opacity is drawn in this many steps (one trace per step; Plotly has one opacity per trace)
OPACITY_STEPS = 5


def point_event_js(graph_id: str) -> str:
    """A clientside callback body: Plotly click / hover data -> ``{curve, customdata, timestamp}``.

    Points are identified by ``customdata``. Figures send it as a typed array, which dcc.Graph
    leaves out of its event data, so it is read from the plotted traces instead (None when absent)."""
    return """
function(event) {
    if (!event || !event.points || !event.points.length) { return null; }
    const point = event.points[0];
    const graph = document.querySelector('#%s .js-plotly-plot');
    const trace = graph && graph._fullData && graph._fullData[point.curveNumber];
    if (!trace || trace.customdata === undefined || trace.customdata === null) { return null; }
    const value = trace.customdata[point.pointNumber];
    if (value === undefined || value === null) { return null; }
    return {curve: point.curveNumber, customdata: Number(value), timestamp: event.timestamp || Date.now()};
}
""" % graph_id


def button_click_js(fields: tuple[str, ...]) -> str:
    """A clientside callback body: a click on a pattern-matching button -> ``{field: id[field], ...,
    timestamp}`` with the given fields of the button's id (a button being drawn is no click)."""
    picked = ", ".join(f"{field}: target.{field}" for field in fields)
    return """
function(clicks) {
    const context = window.dash_clientside.callback_context;
    const target = context.triggered_id;
    const value = context.triggered.length ? context.triggered[0].value : null;
    if (!target || typeof target !== 'object' || !value) { return window.dash_clientside.no_update; }
    return {%s, timestamp: Date.now()};
}
""" % picked


def clicked(event: dict | None) -> tuple[int, int] | None:
    """``(curve number, customdata)`` of a point event (``{curve, customdata, timestamp}``), or None."""
    try:
        return int(event["curve"]), int(event["customdata"])
    except (TypeError, KeyError, ValueError):
        return None


def plotly_text(text: str) -> str:
    """``text`` as Plotly shows it literally: its labels read a small HTML subset, so ``& < >`` are escaped."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plotly_texts(texts) -> np.ndarray:
    """:func:`plotly_text` of each entry, as an object array."""
    return np.array([plotly_text(text) for text in texts], dtype=object)


def message_figure(message: str = "") -> go.Figure:
    """An empty figure without axes (the message, if any, as its only text)."""
    figure = go.Figure()
    figure.update_layout(xaxis_visible=False, yaxis_visible=False, plot_bgcolor="white", height=200,
                         margin=dict(l=10, r=10, t=10, b=10))
    if message:
        figure.add_annotation(text=plotly_text(message), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return figure


def opacity_step(weights: np.ndarray) -> np.ndarray:
    """int ``[n]``: the opacity step (0 .. OPACITY_STEPS - 1) of each weight in ``[0, 1]``."""
    return np.minimum((np.asarray(weights) * OPACITY_STEPS).astype(int), OPACITY_STEPS - 1)


def step_opacity(step: int) -> float:
    """The opacity a step is drawn with: its upper bound, so a weight of 0.1 is still visible."""
    return (step + 1) / OPACITY_STEPS
