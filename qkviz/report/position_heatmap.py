"""The heads x relative-offset heatmap of the head atlas (Transformer-XL App. D, Fig. 5), as a Plotly figure.

Shared by the report's atlas page (:mod:`qkviz.report.atlas_html`) and the app's Positions view; numpy and
Plotly only. Row ``r`` of the heatmap is the flat head ``r = layer * n_heads + head`` (model order,
heads grouped by layer, a line between layers), so a click on a row names its head by the row index.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

#: weights below this are drawn at it (log10 -4), so a zero does not leave a hole in the scale
FLOOR = 1e-4
#: beyond this many heads, the rows are labelled by layer only
MAX_ROW_LABELS = 120
#: pixels per row: labelled rows need room for their name; unlabelled ones are packed
LABELLED_ROW_PX, ROW_PX, MAX_HEIGHT = 11, 8, 2400


def head_names(n_layers: int, n_heads: int) -> list[str]:
    """``"L{l} H{h}"`` per flat head, in model order."""
    return [f"L{layer} H{head}" for layer in range(n_layers) for head in range(n_heads)]


def log_weights(profiles: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets seen)``: float64 ``[layer * n_heads + head, seen offset]`` log10 of the
    mean weights ``profiles`` ``[layer, head, offset]`` (clipped to [FLOOR, 1]), and int ``[seen offset]``;
    offsets no query could attend to (NaN in every head, e.g. positive ones in a decoder) are dropped."""
    rows = profiles.reshape(profiles.shape[0] * profiles.shape[1], -1)
    seen = ~np.isnan(rows).all(axis=0)
    return np.log10(np.clip(rows[:, seen], FLOOR, 1)), np.asarray(offsets)[seen]


def relative_position_figure(profiles: np.ndarray, offsets: np.ndarray) -> go.Figure:
    """Heatmap of ``profiles`` ``[layer, head, offset]`` (mean attention at each key - query offset,
    NaN where unseen) against ``offsets`` ``[offset]``: rows = heads, colour = log10 mean weight."""
    n_layers, n_heads = profiles.shape[:2]
    values, seen = log_weights(profiles, offsets)
    names = head_names(n_layers, n_heads)
    figure = go.Figure(go.Heatmap(z=values, x=seen, y=names, colorscale="Viridis", zmin=np.log10(FLOOR), zmax=0,
                                  colorbar={"title": {"text": "log10 weight", "side": "right"}},
                                  hovertemplate="%{y}, offset %{x}: 10^%{z:.2f}<extra></extra>"))
    figure.update_yaxes(autorange="reversed", **_row_ticks(names, n_heads))
    figure.update_xaxes(title_text="key position - query position")
    row_px = LABELLED_ROW_PX if len(names) <= MAX_ROW_LABELS else ROW_PX
    figure.update_layout(height=min(200 + row_px * len(names), MAX_HEIGHT), margin={"l": 70, "r": 10, "t": 20, "b": 40},
                         shapes=_layer_lines(n_layers, n_heads))
    return figure


def _row_ticks(names: list[str], n_heads: int) -> dict:
    """Every head named, or (too many to read) each layer's first row named ``L{l}``."""
    if len(names) <= MAX_ROW_LABELS:
        return {"tickmode": "array", "tickvals": names, "ticktext": names, "tickfont": {"size": 9}}
    firsts = names[::n_heads]
    return {"tickmode": "array", "tickvals": firsts, "ticktext": [name.split()[0] for name in firsts]}


def _layer_lines(n_layers: int, n_heads: int) -> list[dict]:
    """A thin white line between consecutive layers' rows (category rows sit at 0, 1, 2 ...)."""
    return [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": layer * n_heads - 0.5,
             "y1": layer * n_heads - 0.5, "line": {"color": "white", "width": 1}, "layer": "above"}
            for layer in range(1, n_layers)]
