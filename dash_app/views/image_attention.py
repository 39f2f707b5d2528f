"""The sentence view's counterpart for image runs: an image with one query's attention laid over its patches.

The image is tiled from its patch thumbnails (:class:`dash_app.data.image_patches.ImagePatches`: the pixels the
model saw) and drawn below a heatmap of the query's attention to every patch, transparent at or below
uniform attention (1 / the number of keys it sees) and opaque red at the strongest; the special tokens
(CLS, distillation token, registers: no place in the image) are a row of cells above it. Clicking a cell
makes that token the query (the heatmap is trace 0 and its ``customdata`` the token's place in the image,
so the sentence view's click relay selects it as a query). The second figure is the same for the mean
over every head of the layer.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dash_app.figure_parts import QUERY_COLOUR
from dash_app.data.image_patches import ImagePatches
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState

#: uniform weight and below transparent, the strongest weight opaque red
OVERLAY_SCALE = [[0.0, "rgba(215, 25, 28, 0)"], [1.0, "rgba(215, 25, 28, 0.85)"]]
FIGURE_PX = 560


def image_query(data: RunData, state: ViewState) -> int:
    """The query's place in the shown image: the selected point's token when it is in this image, else the
    first token (CLS; the top-left patch for a model without one)."""
    rows = data.sentence_rows(state.sentence)
    if state.point is not None:
        token = state.point % data.run.n_tokens
        if rows[0] <= token <= rows[-1]:
            return int(token - rows[0])
    return 0


def image_attention_figure(patches: ImagePatches, image: int, weights: np.ndarray, names: np.ndarray, query: int,
                           title: str) -> go.Figure:
    """``weights`` ``[token]``: the query's weights to every token of ``image`` (special tokens first), drawn
    over the image; ``names`` the tokens' names; ``query`` the query's place (ringed)."""
    rows, cols, prefix = patches.rows, patches.cols, len(patches.prefix)
    shown_prefix = min(prefix, cols)                      # more special tokens than a row holds: listed in the title
    grid = np.full((rows + 1, cols), np.nan)
    grid[1:] = weights[prefix:].reshape(rows, cols)
    grid[0, :shown_prefix] = weights[:shown_prefix]
    place = np.full((rows + 1, cols), None, dtype=object)
    place[1:] = (prefix + np.arange(rows * cols)).reshape(rows, cols)
    place[0, :shown_prefix] = np.arange(shown_prefix)
    text = np.full((rows + 1, cols), "", dtype=object)
    text[1:] = names[prefix:].reshape(rows, cols)
    text[0, :shown_prefix] = names[:shown_prefix]
    x, y = np.arange(cols), np.arange(-1, rows)
    strongest = float(np.nanmax(weights)) if len(weights) else 1.0
    uniform = 1.0 / max(int((weights > 0).sum()), 1)      # a query's weight on every key it sees, were it uniform
    figure = go.Figure(go.Heatmap(z=grid, x=x, y=y, customdata=place, text=text, zmin=min(uniform, strongest),
                                  zmax=max(strongest, uniform + 1e-9),
                                  colorscale=OVERLAY_SCALE, xgap=1, ygap=1, hoverongaps=False,
                                  colorbar=dict(title=dict(text="weight", side="right"), len=0.8),
                                  hovertemplate="%{text}: %{z:.3f}<extra></extra>"))
    query_row, query_col = (-1, query) if query < prefix else divmod(query - prefix, cols)
    figure.add_shape(type="rect", x0=query_col - 0.5, x1=query_col + 0.5, y0=query_row - 0.5, y1=query_row + 0.5,
                     line=dict(color=QUERY_COLOUR, width=3))
    figure.add_layout_image(source=patches.image_uri(image), xref="x", yref="y", x=-0.5, y=-0.5, sizex=cols,
                            sizey=rows, sizing="stretch", xanchor="left", yanchor="top", layer="below")
    height = int(FIGURE_PX * (rows + 1) / cols) + 80
    figure.update_layout(width=FIGURE_PX + 120, height=height, margin=dict(l=10, r=10, t=60, b=10),
                         plot_bgcolor="white", title=dict(text=title, font=dict(size=13), x=0.5),
                         xaxis=dict(visible=False, range=[-0.5, cols - 0.5], fixedrange=True, constrain="domain"),
                         yaxis=dict(visible=False, range=[rows - 0.5, -1.5], fixedrange=True, scaleanchor="x"))
    return figure


def special_weights_text(names: np.ndarray, weights: np.ndarray, prefix: int) -> str:
    return ", ".join(f"{names[i]} {weights[i]:.3f}" for i in range(prefix))


def render_image(data: RunData, state: ViewState, options: list[str], weights_of) -> tuple[go.Figure, go.Figure, str]:
    """The image figure of ``state``'s head, the mean over its layer's heads, and the line above them;
    ``weights_of(layer, head)`` gives the image's ``[query, key]`` weights with the view's options applied."""
    patches = data.patches
    rows = data.sentence_rows(state.sentence)
    names = data.tokens.token.to_numpy()[rows]
    query = image_query(data, state)
    weights = weights_of(state.layer, state.head)[query]
    mean = np.mean([weights_of(state.layer, head)[query] for head in range(data.run.n_heads)], axis=0)
    image_id = data.sentences.text.iat[state.sentence]
    prefix = len(patches.prefix)
    head_figure = image_attention_figure(patches, state.sentence, weights, names, query,
                                         f"layer {state.layer} head {state.head}: {names[query]} attends to")
    layer_figure = image_attention_figure(patches, state.sentence, mean, names, query,
                                          f"layer {state.layer}, mean of its {data.run.n_heads} heads")
    special = f" Special tokens: {special_weights_text(names, weights, prefix)}." if prefix else ""
    message = (f"Image {state.sentence} ({image_id}; {patches.rows} x {patches.cols} patches), query {names[query]}: "
               f"red is its attention above uniform (1/{int((weights > 0).sum())}), the strongest key opaque. Click a "
               f"patch (or a special token above the image) to make it the query.{special}")
    return head_figure, layer_figure, message
