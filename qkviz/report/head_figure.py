"""One head's joint query/key layout as a Plotly figure, for a notebook or a paper (``Run.plot``).

The layout is one the run caches (``qkviz project``): the most faithful there is by default
(:func:`qkviz.projection.best_cached_method`).
Queries are circles and keys diamonds; points are coloured by one of the app's colour options
(:data:`qkviz.report.token_colours.COLOURS`). Categorical colourings (query vs key, punctuation, position
mod 5) are one trace per category with a legend; continuous ones share one labelled colour bar on a scale
whose ends are both visible on the white background (Viridis), log10 values said so. Hovering a point
shows its token.

``fig.write_image("head.svg")`` (or ``.png``, ``.pdf``) works offline with the ``kaleido`` package, which
drives a Chromium-family browser it finds on ``PATH`` (``chromium``, ``google-chrome``, ...); set
``BROWSER_PATH`` to the browser's executable where it is elsewhere.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from qkviz.core.errors import QkvizError
from qkviz.report.token_colours import COLOURS, LOG_SCALE, PUNCTUATION_CLASSES, colour_values, token_features
from qkviz.projection import LAYOUT_METHOD, best_cached_method, cached_layout
from qkviz.store import StoredRun

#: colourings drawn as categories with a legend (the rest are continuous, with a colour bar)
CATEGORICAL = ("type", "punctuation", "position_mod5")
QUERY_COLOUR = "#1b9e77"    # queries green, keys pink, as in the app and AttentionViz
KEY_COLOUR = "#e7298a"
#: categories of punctuation and position mod 5 (Plotly's qualitative palette: dark enough on white)
CATEGORY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
#: continuous colourings: dark purple to yellow, neither end white
CONTINUOUS_SCALE = "Viridis"
#: (kind, marker symbol, legend name) of the queries and the keys
KINDS = (("query", "circle", "queries (circles)"), ("key", "diamond", "keys (diamonds)"))


def head_figure(run: StoredRun, layer: int, head: int, colour: str = "position", method: str | None = None,
                dim: int = 2, *, marker_size: float | None = None, width: int = 760, height: int = 620,
                title: str | None = None) -> go.Figure:
    """The joint query+key layout of ``layer``/``head`` coloured by ``colour`` (see the module)."""
    if colour not in COLOURS:
        raise QkvizError(f"unknown colour {colour!r}; choose one of {', '.join(COLOURS)}")
    if dim not in (2, 3):
        raise QkvizError(f"dim must be 2 or 3, got {dim}")
    run.check_head(layer, head)
    method, points = head_layout(run, layer, head, method, dim)
    n = run.n_tokens
    tokens = np.array([_plotly_text(token) for token in run.tokens.token], dtype=object)
    size = marker_size if marker_size is not None else float(np.clip(9 - np.log10(max(n, 10)) * 1.5, 2.5, 7))
    figure = go.Figure()
    if colour in CATEGORICAL:
        _add_categories(figure, run, layer, head, colour, points, tokens, size)
    else:
        _add_continuous(figure, run, layer, head, colour, points, tokens, size)
    label = COLOURS[colour]
    model = run.manifest.get("model", {}).get("id", "")
    figure.update_layout(
        title=title if title is not None else f"{model}: layer {layer} head {head}, {method} {dim}D, coloured by {label}",
        template="plotly_white", width=width, height=height, legend_itemsizing="constant",
        margin=dict(l=20, r=20, t=80, b=20), hoverlabel=dict(namelength=-1))
    if dim == 2:
        figure.update_xaxes(showticklabels=False, title=f"{method} 1", zeroline=False)
        figure.update_yaxes(showticklabels=False, title=f"{method} 2", zeroline=False, scaleanchor="x")
    else:
        figure.update_layout(scene=dict(xaxis_title=f"{method} 1", yaxis_title=f"{method} 2", zaxis_title=f"{method} 3"))
    return figure


def head_layout(run: StoredRun, layer: int, head: int, method: str | None, dim: int) -> tuple[str, np.ndarray]:
    """``(method, [2 * n_tokens, dim] layout)`` from the run's cache: ``method``'s, or the most faithful
    cached one."""
    if method is None:
        method = best_cached_method(run, layer, head, dim)
    if method is None:
        raise QkvizError(f"no {dim}D layout of layer {layer} head {head} yet; make one with 'qkviz project --run "
                         f"{run.path} --method {LAYOUT_METHOD} --dim {dim} --layers {layer} --heads {head}' (or "
                         f"qkviz.project(run, methods=['{LAYOUT_METHOD}'], dims=[{dim}], layers=[{layer}], "
                         f"heads=[{head}]))")
    return method, cached_layout(run, layer, head, method, dim)


def point_colours(run: StoredRun, layer: int, head: int, colour: str) -> np.ndarray:
    """``[2 * n_tokens]`` float32 values of a continuous ``colour`` (log10 for :data:`LOG_SCALE`), queries first."""
    if colour == "norm":
        return np.concatenate([np.linalg.norm(run.queries(layer, head), axis=1),
                               np.linalg.norm(run.keys(layer, head), axis=1)]).astype(np.float32)
    values = colour_values(token_features(run.tokens)[colour].to_numpy(), colour)
    return np.concatenate([values, values])


def _add_continuous(figure: go.Figure, run: StoredRun, layer: int, head: int, colour: str, points: np.ndarray,
                    tokens: np.ndarray, size: float) -> None:
    values = point_colours(run, layer, head, colour)
    label = COLOURS[colour] + (" (log10)" if colour in LOG_SCALE else "")
    n = run.n_tokens
    for index, (kind, symbol, name) in enumerate(KINDS):
        rows = slice(index * n, (index + 1) * n)
        figure.add_trace(_scatter(points[rows], name=name, hovertext=tokens,
                                  hovertemplate=f"%{{hovertext}}<br>{label}: %{{marker.color:.3g}}<extra>{kind}</extra>",
                                  marker=dict(symbol=symbol, size=size, color=values[rows], coloraxis="coloraxis",
                                              line=dict(width=0))))
    figure.update_layout(coloraxis=dict(colorscale=CONTINUOUS_SCALE, colorbar=dict(title=dict(text=label, side="right"))),
                         # the query / key legend above the plot, clear of the colour bar
                         legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom"))


def _add_categories(figure: go.Figure, run: StoredRun, layer: int, head: int, colour: str, points: np.ndarray,
                    tokens: np.ndarray, size: float) -> None:
    n = run.n_tokens
    if colour == "type":
        categories = [("queries", QUERY_COLOUR, np.arange(n), "circle"),
                      ("keys", KEY_COLOUR, np.arange(n, 2 * n), "diamond")]
    else:
        values = token_features(run.tokens)[colour].to_numpy().astype(int)
        names = PUNCTUATION_CLASSES if colour == "punctuation" else [f"position mod 5 = {v}" for v in range(5)]
        categories = []
        for value, name in enumerate(names):
            rows = np.flatnonzero(values == value)
            for kind_index, (kind, symbol, _) in enumerate(KINDS):
                categories.append((f"{name}, {kind}", CATEGORY_COLOURS[value % len(CATEGORY_COLOURS)],
                                   rows + kind_index * n, symbol))
    for name, hue, rows, symbol in categories:
        if len(rows) == 0:
            continue
        figure.add_trace(_scatter(points[rows], name=name, hovertext=tokens[rows % n],
                                  hovertemplate=f"%{{hovertext}}<extra>{_plotly_text(name)}</extra>",
                                  marker=dict(symbol=symbol, size=size, color=hue, line=dict(width=0))))


def _scatter(points: np.ndarray, **options):
    if points.shape[1] == 3:
        return go.Scatter3d(x=points[:, 0], y=points[:, 1], z=points[:, 2], mode="markers", **options)
    return go.Scatter(x=points[:, 0], y=points[:, 1], mode="markers", **options)


def _plotly_text(text: str) -> str:
    """``text`` as Plotly shows it literally (its labels read a small HTML subset)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
