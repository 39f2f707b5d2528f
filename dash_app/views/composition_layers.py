"""The composition view aggregated by layer: a layer x layer matrix per side, what a model of a thousand heads shows
first (:mod:`dash_app.views.composition`).

Each side ticked (queries, keys, values) is a matrix of its own: a cell is a target layer (down) and a source layer
(across), its colour the summed ``|weight|`` of the edges from that layer's heads and MLP into that target layer's
heads (the same edges, weight and minimum as the head graph: a cell sums every edge that passes the minimum, not the
strongest N alone), its hover the signed sum and the number of edges. The units differ by side (a logit for Q and K,
a length moved for V), so each matrix has its own colour scale. A click on a cell opens its target layer: the head
graph of the edges into and out of that layer.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

#: the composition view's levels: ``auto`` shows the layer matrix above :data:`LAYERS_FROM_HEADS` heads, else heads
LEVELS = {"auto": "auto", "layers": "layer × layer", "heads": "heads"}
#: at more heads than this, ``auto`` opens on the layer matrix (a 12 x 12 model's every edge is legible as a graph)
LAYERS_FROM_HEADS = 256
#: each side's colour scale, after the head graph's green, pink and purple
SCALES = {"query": "Greens", "key": "RdPu", "value": "Purples"}
TITLES = {"query": "into queries (Q)", "key": "into keys (K)", "value": "into values (V)"}


def chosen_level(value) -> str:
    """The level radio's value as the server takes it: one of :data:`LEVELS`, else ``auto``."""
    return value if isinstance(value, str) and value in LEVELS else "auto"


def shows_layers(level: str, n_layers: int, n_heads: int, layer: int, head: int, all_value: int) -> bool:
    """Whether the view draws the layer matrix: no layer or head opened, and the level says layers (``auto``: more
    than :data:`LAYERS_FROM_HEADS` heads)."""
    if layer != all_value or head != all_value:
        return False
    return level == "layers" or (level == "auto" and n_layers * n_heads > LAYERS_FROM_HEADS)


def layer_sums(edges: pd.DataFrame, n_layers: int, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per target layer x source layer ``[target, source]``, the edges of ``side``: their summed ``|weight|``,
    their signed sum and their number."""
    return side_sums(edges, n_layers, (side,))[side]


def side_sums(edges: pd.DataFrame, n_layers: int, sides: tuple[str, ...],
              keep: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`layer_sums` of every side of ``sides``, of the edges ``keep`` marks (bool per edge; None: all), in one
    pass over the edges: a million edges' columns are read once, never copied row by row, and each sum is one
    ``bincount`` over the cells of every side (side, target, source)."""
    codes = side_codes(edges.side, sides)
    inside = codes >= 0 if keep is None else (codes >= 0) & keep
    size = n_layers * n_layers
    cells = (codes[inside] * size + edges.target_layer.to_numpy(dtype=np.int64)[inside] * n_layers
             + edges.source_layer.to_numpy(dtype=np.int64)[inside])
    weights = edges.weight.to_numpy(dtype=np.float64)[inside]
    shape = (len(sides), n_layers, n_layers)
    magnitude = np.bincount(cells, weights=np.abs(weights), minlength=len(sides) * size).reshape(shape)
    signed = np.bincount(cells, weights=weights, minlength=len(sides) * size).reshape(shape)
    count = np.bincount(cells, minlength=len(sides) * size).reshape(shape)
    return {side: (magnitude[index], signed[index], count[index]) for index, side in enumerate(sides)}


def side_codes(side: pd.Series, sides: tuple[str, ...]) -> np.ndarray:
    """int64 per edge: the index of its side in ``sides``, -1 for another side; a categorical column (the app's
    every edge) is read by its codes, not compared string by string."""
    if isinstance(side.dtype, pd.CategoricalDtype):
        lookup = np.array([sides.index(name) if name in sides else -1 for name in side.cat.categories] + [-1])
        return lookup[side.cat.codes.to_numpy()]                    # a missing side's code, -1, reads the last
    return pd.Index(list(sides)).get_indexer(side.to_numpy(dtype=object)).astype(np.int64)


def layer_figure(edges: pd.DataFrame, n_layers: int, sides: tuple[str, ...], by: str,
                 keep: np.ndarray | None = None) -> go.Figure:
    """One heatmap per side of ``sides`` (its own colour scale; ``y``: the target layer, ``x``: the source layer) of
    the edges ``keep`` marks (None: every edge), ``customdata``: ``[target, source, signed sum, edges]`` per cell
    (for the hover); cells without an edge are blank."""
    shown = sides or ("query",)
    figure = make_subplots(rows=1, cols=len(shown), subplot_titles=[TITLES[side] for side in shown],
                           horizontal_spacing=0.08)
    layers = np.arange(n_layers)
    sums = side_sums(edges, n_layers, sides, keep) if sides else {"query": (np.zeros((n_layers,) * 2),) * 3}
    for column, side in enumerate(shown, start=1):
        magnitude, signed, count = sums[side]
        data = np.stack([np.repeat(layers[:, None], n_layers, 1), np.repeat(layers[None], n_layers, 0), signed,
                         count], axis=-1)
        figure.add_trace(go.Heatmap(
            z=np.where(count > 0, magnitude, np.nan), x=layers, y=layers, customdata=data, colorscale=SCALES[side],
            zmin=0, name=side, hoverongaps=False, xgap=1, ygap=1,
            colorbar=dict(x=column / len(shown) - 0.02, len=0.8, thickness=10, title=dict(text="Σ|w|", side="top")),
            hovertemplate=("L%{customdata[1]} → L%{customdata[0]} " + side + f"s: Σ|{by}| %{{z:.3f}}, signed "
                           "%{customdata[2]:+.3f}, %{customdata[3]} edges · click to open layer %{customdata[0]}"
                           "<extra></extra>")), row=1, col=column)
        figure.update_xaxes(title_text="source layer (heads and MLP)", dtick=max(1, n_layers // 8), row=1,
                            col=column, constrain="domain")
        figure.update_yaxes(title_text="target layer" if column == 1 else None, autorange="reversed",
                            dtick=max(1, n_layers // 8), row=1, col=column, scaleanchor=f"x{column if column > 1 else ''}")
    figure.update_layout(
        autosize=True, plot_bgcolor="white", margin=dict(l=60, r=40, t=80, b=50), uirevision="composition-layers",
        title=dict(text=f"Composition by layer: summed |{by}| of the edges from each source layer's heads and MLP "
                        "into each target layer's heads; click a cell to open its target layer", font=dict(size=13)))
    return figure


def clicked_layer(click, n_layers: int) -> int | None:
    """The target layer of a click on the matrix (its point's ``y``: a cell's row is its target layer), or None for
    anything that is not a click on a cell of a layer in range."""
    if not isinstance(click, dict) or not isinstance(click.get("points"), list) or not click["points"]:
        return None
    point = click["points"][0]
    target = point.get("y") if isinstance(point, dict) else None
    if isinstance(target, float) and target.is_integer():
        target = int(target)
    if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < n_layers:
        return None
    return target
