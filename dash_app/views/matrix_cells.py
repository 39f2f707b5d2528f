"""The matrix view's cells: where each head's cell and its layout lie in the grid (:func:`cell_origins`), and
the cells coloured by a head-atlas column -- one translucent heatmap under the points (slot 5), on the column's
colour scale or the pattern labels' colours, each cell's badge (its label and value) and the legend of the
labels shown.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dash_app.atlas_columns import LABEL_SORT, column_name, format_value, label_tag
from dash_app.figure_parts import legend_entries
from dash_app.run_data import RunData
from qkviz.analysis import LABELS
from qkviz.report import LABEL_COLOURS

CELL = 1000                 # grid units per cell
INNER = (120, 880)          # where a head's layout lies inside its cell, both axes ...
LABEL_BAND = 60             # ... shifted down by this much, leaving the top for the label
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


def cell_heatmap(values: np.ndarray, order: np.ndarray, n_rows: int, n_cols: int, column: str) -> go.Heatmap:
    """Slot 5: each cell's translucent background, ``values`` ``[flat head]`` on the column's colour scale
    (label indices on the labels' colours); NaN cells stay white. Not hoverable: clicks reach the points."""
    grid = values[order].reshape(n_rows, n_cols)[::-1]                    # y grows upwards: bottom row first
    centres = dict(x=(np.arange(n_cols) + 0.5) * CELL, y=(np.arange(n_rows) + 0.5) * CELL)
    bar = dict(thickness=12, len=0.9, x=1.0, xanchor="left", xpad=8)
    if column == LABEL_SORT:                    # categories: named in the legend (label_legend), no bar
        scale = dict(colorscale=label_colourscale(), zmin=-0.5, zmax=len(LABELS) - 0.5, showscale=False)
    else:
        finite = values[~np.isnan(values)]
        low, high = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 1.0)
        scale = dict(colorscale=STATISTIC_SCALE, zmin=low, zmax=high if high > low else low + 1,
                     colorbar=dict(title=dict(text=column_name(column), side="right"), **bar))
    return go.Heatmap(z=grid, **centres, **scale, opacity=CELL_OPACITY, hoverinfo="skip", name="cells", xgap=1, ygap=1)


def label_legend(values: np.ndarray) -> list:
    """Legend entries of the pattern labels the cells show (``values`` ``[flat head]`` label indices)."""
    shown = [label for index, label in enumerate(LABELS) if np.any(values == index)]
    return legend_entries(shown, [LABEL_COLOURS[label] for label in shown], legendgroup="cells", title="cells:")


def cell_origins(order: np.ndarray, n_rows: int, n_cols: int) -> np.ndarray:
    """float64 ``[flat head, 2]``: the lower-left corner of each head's cell (row 0 at the top)."""
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return np.stack([(position % n_cols) * CELL, (n_rows - 1 - position // n_cols) * CELL], axis=1).astype(np.float64)
