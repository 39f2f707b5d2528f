"""The matrix view's message line, above its figure: what the figure does not show and the command that makes it,
what an order lacks, the filter, and what the search's cluster badges count."""

from __future__ import annotations

import numpy as np

from dash_app.panels.related import missing_related_message
from dash_app.data.run_data import HeadLayouts, RunData
from dash_app.state.view_state import ViewState
from dash_app.views.matrix.filter import filter_message
from dash_app.views.matrix.raster import rasterised
from qkviz.projection import method_label


def matrix_message(data: RunData, method: str, dim: int, layouts: HeadLayouts) -> str:
    """What the figure does not show, and the command that makes the missing layouts."""
    parts = []
    if dim == 3:
        parts.append(f"The matrix shows the 2D {method} layouts; 3D is in the single-head view.")
    total, name = data.n_total_heads, method_label(method)
    if layouts.stand_in:
        parts.append(f"{len(layouts.stand_in)} of {total} heads are drawn in PCA (marked 'PCA, waiting') until their "
                     f"{name} layout, being made in the background, lands.")
    empty = len(layouts.missing) - len(layouts.stand_in)
    if empty:
        parts.append(f"{empty} of {total} heads have no {name} 2D layout (drawn empty): make them with "
                     f"'qkviz project --run {data.run.path} --method {method} --dim 2'.")
    return " ".join(parts)


def cluster_message(clusters: np.ndarray | None, matches: np.ndarray | None) -> str:
    """What the search's cluster badges (``"· 6 clusters"``) count: the groups the matches' queries and keys form
    in each head's 2D layout (:func:`qkviz.analysis.cluster_counts`); both points of a token count, so a head
    can show up to twice as many clusters as matches. ``""`` without a search or a head with a count."""
    if clusters is None or matches is None or not len(matches) or not (np.asarray(clusters) >= 0).any():
        return ""
    count = len(matches)
    tokens = "matching token forms" if count == 1 else f"{count:,} matching tokens form"
    return (f"Cluster badges: how many groups the {tokens} in each head's 2D layout; queries and keys both "
            f"count, so {count:,} {'match' if count == 1 else 'matches'} can make up to {2 * count:,} clusters "
            "(fewer: the head draws them together).")


def full_message(data: RunData, state: ViewState, correlations: np.ndarray | None, kept: np.ndarray | None,
                 clusters: np.ndarray | None, matches: np.ndarray | None) -> str:
    """The line above the figure: what it does not show (:func:`matrix_message`), what an order lacks, the
    filter (``kept``: the heads it keeps), and what the search's cluster badges count."""
    layouts = data.all_layouts(state.method)
    message = matrix_message(data, state.method, state.dim, layouts)
    if rasterised(data):
        message += (f" Each head is an image of all its {2 * data.run.n_tokens:,} points (darker where more fall); "
                    "click a head to see and hover its points.")
    if state.sort == "correlation" and correlations is None:
        message += (" No correlation report for this run yet: make it with "
                    f"'qkviz report --run {data.run.path} --out reports/{data.name}'.")
    if state.sort == "clusters" and clusters is None:
        message += " Search a token to order heads by how many clusters its matches form."
    if state.sort == "related" and data.related() is None:
        message += f" {missing_related_message(data)}"
    pieces = [message.strip(), filter_message(data, state, kept), cluster_message(clusters, matches)]
    return " ".join(piece for piece in pieces if piece)
