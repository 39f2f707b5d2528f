"""The matrix view's figure (:mod:`dash_app.views.matrix.view`): every head's points or thumbnail in its grid cell,
the cells' labels, the axes naming layers and heads, the margins; built from the parts the view computes."""

from __future__ import annotations

import re

import numpy as np
import plotly.graph_objects as go

from dash_app.views.matrix.cells import cell_heatmap
from dash_app.views.matrix.grid import CELL, Grid, axis_ticks
from dash_app.views.matrix.points import colour_markers, match_traces, place, raster_extras
from dash_app.views.matrix.raster import sheet_image

#: extra width for the colour bar when cells are coloured
COLOUR_BAR_PX = 110
#: extra height under the grid for the points' colour bars (a continuous colouring)
POINT_BARS_PX = 70
#: the opacity of the sampled points of a head a filter fades
DIMMED_POINTS = 0.06


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


def cell_text(label: str, model: bool, characters: int) -> str:
    """What a cell writes of its head's label (:func:`head_labels`): all of it in a list grid, its badges only in
    a model grid (whose axes name the head); each line cut to ``characters``."""
    if model:
        label = re.sub(r"^L\d+ H\d+( · )?", "", label).removeprefix("<br>")
    lines = [line if len(line) <= characters else line[:max(characters - 1, 1)] + "…" for line in label.split("<br>")]
    return "<br>".join(line for line in lines if line)


def grid_margin(grid_model: bool, legend: bool, cell_bar: bool, bars: bool) -> dict:
    """The figure's margins: room for the axes' labels (a model grid), the legend, the cells' and points' bars."""
    return dict(l=40 if grid_model else 12, r=12 + (COLOUR_BAR_PX if cell_bar else 0), t=36 if legend else 12,
                b=(26 if grid_model else 12) + (POINT_BARS_PX if bars else 0), pad=0)


def point_opacity(head: np.ndarray, kept: np.ndarray | None, searching: bool):
    """The sampled points' opacity: one number, or float32 ``[point]`` fading the heads a filter leaves out
    (``head``: each point's flat head, as :func:`place` returns it)."""
    base = 0.25 if searching else 0.6
    if kept is None:
        return base
    return np.where(kept[head], base, DIMMED_POINTS).astype(np.float32)


def label_trace(grid: Grid, labels: list[str], kept: np.ndarray | None) -> go.Scatter:
    """Slot 4: each cell's text at its top left (mode ``none`` when cells are too small to write it);
    ``hovertext`` keeps every head's full label, ``text`` what its cell writes."""
    across, down = grid.cell_px
    size = 10 if across >= 90 else 9
    characters = max(int(across / (0.56 * size)), 3)
    origins = grid.origins()
    texts = [cell_text(label, grid.model, characters) for label in labels]
    colours = None if kept is None else np.where(kept, "#333", "#bbb").tolist()
    return go.Scatter(x=origins[:, 0] + 0.03 * CELL, y=origins[:, 1] + CELL - 2 / max(down, 1) * CELL, text=texts,
                      hovertext=labels, customdata=np.arange(len(labels), dtype=np.uint16),
                      mode="text" if grid.shows_text() else "none", textposition="bottom right",
                      textfont=dict(size=size, color=colours or "#333"), hoverinfo="none", showlegend=False,
                      name="heads")


def grid_axes(grid: Grid) -> tuple[dict, dict]:
    """The x and y axes: the cells' borders as minor grid lines; a model grid's layers and heads named."""
    common = dict(showgrid=False, zeroline=False, fixedrange=True, ticks="", tickfont=dict(size=10, color="#555"),
                  minor=dict(tick0=0, dtick=CELL, showgrid=True, gridcolor="#d0d0d0", ticks=""))
    x = dict(common, range=[0, grid.n_cols * CELL], showticklabels=False)
    y = dict(common, range=[0, grid.n_rows * CELL], showticklabels=False)
    if grid.model:
        across, down = grid.cell_px
        names = ("L", "H") if grid.layers_as_rows else ("H", "L")
        y.update(axis_ticks(grid.n_rows, down, 13, names[0], downwards=True))
        x.update(axis_ticks(grid.n_cols, across, 30, names[1]))
    return x, y


def matrix_figure(points: np.ndarray, sample: np.ndarray, grid: Grid, labels: list[str],
                  matches: np.ndarray | None = None, cells: go.Heatmap | None = None,
                  values: np.ndarray | None = None, colour: str = "type", legend: list | None = None,
                  sheet: str | None = None, value_range: tuple[float, float] | None = None,
                  kept: np.ndarray | None = None, margin: dict | None = None) -> go.Figure:
    """The matrix figure: traces queries, keys, query matches, key matches (all ``scattergl``), labels, the
    cells (hover, clicks and their background, drawn under the points), then ``legend`` (legend-only entries).
    It fills its graph's box: the cells take the shape the box gives them, each head's layout a square in its
    cell.

    ``points`` ``[flat head, 2 * n_tokens, 2]`` normalised layouts; ``sample`` the token indices drawn per head;
    ``grid`` where each head is drawn (:mod:`dash_app.views.matrix.grid`); ``matches`` matched token indices;
    ``values`` ``[flat head, 2 * n_tokens]`` what every head's points are coloured by
    (:func:`~dash_app.views.matrix.points.head_colours`, None: queries green, keys pink), ``colour`` its name;
    ``kept`` bool ``[flat head]`` the heads a filter keeps (the others faded), None: all.

    With ``sheet`` (a PNG data URI of every head's points, see :mod:`dash_app.views.matrix.raster`) the heads are
    one image instead: slots 0 and 1 empty SVG traces, ``sample`` and ``values`` unused, a continuous colouring's
    bars span ``value_range``."""
    searching = matches is not None and len(matches) > 0
    drawn = grid.positions >= 0
    traces = []
    if sheet is not None:
        traces += [go.Scatter(x=[], y=[], name=name, showlegend=False) for name in ("queries", "keys")]
        legend = (legend or []) + raster_extras(colour, value_range)
    else:
        markers = colour_markers(points, sample, values, colour, drawn)
        for (name, keys), marker in zip((("queries", False), ("keys", True)), markers):
            x, y, head = place(points, grid, sample, keys)
            traces.append(go.Scattergl(x=x, y=y, customdata=head, mode="markers", name=name, hoverinfo="skip",
                                       marker=dict(marker, size=2.5, opacity=point_opacity(head, kept, searching))))
    traces += match_traces(points, grid, matches, sheet is not None)
    traces.append(label_trace(grid, labels, kept))
    traces.append(cells if cells is not None else cell_heatmap(grid, labels))
    figure = go.Figure(traces + (legend or []))
    xaxis, yaxis = grid_axes(grid)
    figure.update_layout(
        autosize=True, margin=margin or grid_margin(grid.model, bool(legend), False, False), xaxis=xaxis, yaxis=yaxis,
        plot_bgcolor="white", legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, groupclick="toggleitem"),
        hovermode="closest", uirevision="matrix",
        images=[sheet_image(sheet, grid)] if sheet is not None else None)
    return figure
