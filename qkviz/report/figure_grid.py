"""Several small heatmaps as one Plotly figure, in a grid of subplots, each with its title and colour bar.

A report page that draws its layer x head grids as one figure each opens slowly: most of a small heatmap's
time in the browser is the figure's own set-up, not its cells. The atlas's statistics (about twenty) and the
correlation report's spaces are drawn this way as one figure each.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

#: room between panels, as a share of the figure's width, for a colour bar and the next panel's row labels
GAP_WITH_SCALE, GAP = 0.09, 0.05
#: the most tick labels on a panel's horizontal axis (32 heads' names side by side overlap)
TICKS_PER_PANEL = 12


def heatmap_grid(panels: dict[str, go.Heatmap], columns: int, panel_height: int, shared_scale: bool = False
                 ) -> go.Figure:
    """``panels`` (title: heatmap) in rows of ``columns``, each panel ``panel_height`` pixels tall, every
    panel's rows top to bottom. A panel whose heatmap shows its scale gets a colour bar beside it; with
    ``shared_scale`` (every panel on the same colour range) only the first panel's, at the figure's right."""
    columns = max(1, min(columns, len(panels)))
    rows = max(1, math.ceil(len(panels) / columns))
    if shared_scale:
        for number, trace in enumerate(panels.values()):
            trace.showscale = number == 0
    scales = not shared_scale and any(trace.showscale is not False for trace in panels.values())
    title_px = 40
    figure = make_subplots(rows=rows, cols=columns, subplot_titles=list(panels),
                           horizontal_spacing=GAP_WITH_SCALE if scales and columns > 1 else GAP,
                           vertical_spacing=title_px / (rows * (panel_height + title_px)) if rows > 1 else 0)
    for number, trace in enumerate(panels.values()):
        row, column = divmod(number, columns)
        subplot = figure.get_subplot(row + 1, column + 1)
        if shared_scale and number == 0:
            trace.colorbar = {"x": 1.01, "xanchor": "left", "y": 0.5, "yanchor": "middle", "len": 1, "thickness": 12}
        elif trace.showscale is not False:
            right, (bottom, top) = subplot.xaxis.domain[1], subplot.yaxis.domain
            trace.colorbar = {"x": right + 0.005, "xanchor": "left", "y": (bottom + top) / 2, "yanchor": "middle",
                              "len": top - bottom, "thickness": 10, **(trace.colorbar.to_plotly_json()
                                                                      if trace.colorbar else {})}
        figure.add_trace(trace, row=row + 1, col=column + 1)
    figure.update_yaxes(autorange="reversed")
    # horizontal tick labels, thinned by Plotly to what fits: rotated ones ran into the next row's titles
    figure.update_xaxes(tickangle=0, nticks=TICKS_PER_PANEL)
    figure.update_annotations(font_size=12)
    figure.update_layout(height=rows * (panel_height + title_px) + 40, margin={"l": 60, "r": 40, "t": 40, "b": 30})
    return figure
