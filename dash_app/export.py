"""PNG and SVG export of a view's figure: a small "Export PNG SVG" control beside each view's controls.

The image is made in the browser (``exportFigure`` in ``assets/clientside.js`` calls
``Plotly.downloadImage`` on the graph), so it is the figure as the view shows it, as one image (the
matrix's 72 heads included): PNG at twice the screen's resolution, SVG with the axes, text and legend
as vectors (WebGL points are embedded in it as an image, as Plotly draws them). Graphs that show
Plotly's toolbar get :func:`image_config`, so its camera button saves the same PNG.
"""

from __future__ import annotations

import dash
from dash import ALL, ClientsideFunction, Input, Output, html

from dash_app import ids
from dash_app.state.events import NAMESPACE

FORMATS = ("png", "svg")
#: a PNG's pixels per screen pixel
PNG_SCALE = 2


def export_buttons(graph: str, name: str) -> html.Span:
    """"Export PNG SVG": one button per format saving ``graph``'s figure as ``qkviz-<name>.<format>``."""
    return html.Span(className="export", children=[
        html.Span("Export", className="hint"),
        *(html.Button(form.upper(), id={"type": ids.EXPORT, "graph": graph, "format": form, "name": name},
                      n_clicks=0, title=f"save this figure as {form.upper()}") for form in FORMATS)])


def image_config(name: str, **config) -> dict:
    """A ``dcc.Graph`` config whose toolbar camera saves ``qkviz-<name>.png`` at :data:`PNG_SCALE`."""
    return {"displaylogo": False, "responsive": True,
            "toImageButtonOptions": {"format": "png", "filename": f"qkviz-{name}", "scale": PNG_SCALE}, **config}


def register(app: dash.Dash) -> None:
    """Save the figure of the export button clicked (in the browser; the store records the last export)."""
    app.clientside_callback(ClientsideFunction(NAMESPACE, "exportFigure"), Output(ids.EXPORT_SINK, "data"),
                            Input({"type": ids.EXPORT, "graph": ALL, "format": ALL, "name": ALL}, "n_clicks"),
                            prevent_initial_call=True)
