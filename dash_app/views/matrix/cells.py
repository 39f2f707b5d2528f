"""The matrix view's cells: one heatmap cell per grid cell (slot 5) that hover and clicks reach, invisible or
coloured by a head-atlas column (translucent, under the points, on the column's colour scale or the pattern
labels' colours), each cell's badge (its label and value) and the legend of the labels shown. Where the cells lie
is :mod:`dash_app.views.matrix.grid`.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dash_app.data.atlas_columns import LABEL_SORT, column_name, format_value, label_tag
from dash_app.figure_parts import legend_entries
from dash_app.data.run_data import RunData
from dash_app.views.matrix.grid import CELL, Grid
from qkviz.analysis import LABELS
from qkviz.analysis.labels import LABEL_COLOURS

CELL_OPACITY = 0.45         # the cells' background under the points
STATISTIC_SCALE = "Blues"   # a hue apart from the green queries and pink keys


def atlas_badges(data: RunData, column: str) -> list[str]:
    """Per flat head: its label's short tag, and its value of ``column`` (``"first · 95.4%"``); ``""`` if absent."""
    badges = [""] * data.n_total_heads
    atlas = data.atlas()
    if atlas is None:
        return badges
    table = atlas.table
    offsets = table["offset"].to_numpy(float) if "offset" in table else np.full(len(table), np.nan)
    values = table[column].to_numpy(float) if column != LABEL_SORT else None
    for index, (layer, head, label) in enumerate(zip(table["layer"], table["head"], table["label"])):
        badge = label_tag(str(label), offsets[index])
        if values is not None:
            badge += f" · {format_value(column, values[index])}"
        badges[int(layer) * data.run.n_heads + int(head)] = badge
    return badges


def label_colourscale() -> list[list]:
    """A stepped colour scale mapping label index ``i`` (of :data:`LABELS`, z in ``[-0.5, n - 0.5]``) to its colour."""
    scale = []
    for number, label in enumerate(LABELS):
        scale += [[number / len(LABELS), LABEL_COLOURS[label]], [(number + 1) / len(LABELS), LABEL_COLOURS[label]]]
    return scale


def cell_heatmap(grid: Grid, names: list[str], values: np.ndarray | None = None, column: str = "",
                 kept: np.ndarray | None = None) -> go.Heatmap:
    """Slot 5: one cell per grid cell, its ``customdata`` the flat head in it (None: an empty cell) and hover
    naming it (``names`` ``[flat head]``): a click anywhere in a cell opens its head (``pointEvent`` finds the
    cell from its x and y). Invisible, or with ``values`` ``[flat head]`` each cell's translucent background on
    the column's colour scale (label indices on the labels' colours); NaN cells, empty ones and heads a filter
    dims (``kept`` False) stay white. An SVG trace: a matrix of images starts no WebGL context (in a browser
    without a GPU, starting one took 1-2 s)."""
    heads = grid.cell_heads()[::-1]                                       # y grows upwards: bottom row first
    present = heads >= 0
    flat = np.where(present, heads, 0)
    customdata = np.where(present, heads, None).tolist()
    text = np.where(present, np.asarray(names, dtype=object)[flat], "").tolist()
    centres = dict(x=((np.arange(grid.n_cols) + 0.5) * CELL).tolist(), y=((np.arange(grid.n_rows) + 0.5) * CELL).tolist())
    common = dict(customdata=customdata, text=text, hovertemplate="%{text}<extra></extra>", name="cells",
                  showlegend=False, **centres)
    if values is None:
        return go.Heatmap(z=np.zeros(heads.shape, dtype=np.uint8), opacity=0, showscale=False, **common)
    shown = values if kept is None else np.where(kept, values, np.nan)
    grid_values = np.where(present, shown[flat], np.nan)
    bar = dict(thickness=12, len=0.9, x=1.0, xanchor="left", xpad=8)
    if column == LABEL_SORT:                    # categories: named in the legend (label_legend), no bar
        scale = dict(colorscale=label_colourscale(), zmin=-0.5, zmax=len(LABELS) - 0.5, showscale=False)
    else:
        finite = values[~np.isnan(values)]
        low, high = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 1.0)
        scale = dict(colorscale=STATISTIC_SCALE, zmin=low, zmax=high if high > low else low + 1,
                     colorbar=dict(title=dict(text=column_name(column), side="right"), **bar))
    return go.Heatmap(z=grid_values, **scale, opacity=CELL_OPACITY, xgap=1, ygap=1, **common)


def label_legend(values: np.ndarray) -> list:
    """Legend entries of the pattern labels the cells show (``values`` ``[flat head]`` label indices)."""
    shown = [label for index, label in enumerate(LABELS) if np.any(values == index)]
    return legend_entries(shown, [LABEL_COLOURS[label] for label in shown], legendgroup="cells", title="cells:")
