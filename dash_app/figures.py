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
