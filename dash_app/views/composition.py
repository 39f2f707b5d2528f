"""Composition view: which earlier heads and MLPs build each head's queries (Q-composition), keys (K-composition)
and values (V-composition).

Every head is a node where the matrix puts it (layer down, head across), each layer's MLP a node in a column of
its own; an edge runs from an earlier head or MLP to a head it feeds, green into the node's left side for its
queries, pink into its right side for its keys, purple into its top for its values, as wide and opaque as its
``|weight|`` (dotted when negative). The edges are :func:`qkviz.explain.composition_edges` of the run's stored
circuits (``run.circuits``, made by ``qkviz stats --run R --circuits``). Q- and K-edges are weighted by the parts'
attention-weighted mean ``contribution`` to the head's partner logits, or their ``lift`` over the other keys;
V-edges by the parts' share of the length of what the head moves (another unit, and no lift: with ``lift`` no
V-edge is drawn). So the two units are never ranked together: Q/K edges and V-edges each have their minimum
``|weight|``, each their strongest N, each their widths. Controls: the sides (queries, keys, values: a checklist),
the weight, the two minimums, the strongest N, and a layer / head whose edges (in or out) alone are drawn. A click
on a head node opens it in the single view (``customdata``: the flat head, as in the matrix view). Without stored
circuits the page says how to make them.

At a thousand heads the graph of every head is no picture: above 256 heads the view opens on the layer x layer
matrix of summed composition, one per side (:mod:`dash_app.views.composition_layers`; the level control picks it or
the heads by hand); a click on a cell opens its target layer, the head graph of the edges into and out of that layer,
and the layer and head dropdowns open any layer or head. The edges of a run are worked out once per weight (every
edge, largest first) and filtered per drawing.
"""

from __future__ import annotations

import dash
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.state.events import open_clicked_head
from dash_app.export import export_buttons, image_config
from dash_app.figure_parts import BLANK_FIGURE, KEY_COLOUR, QUERY_COLOUR, message_figure
from dash_app.data.run_data import RunData
from dash_app.state.view_state import bounded_number, checked_state
from dash_app.state.view_registry import AppContext, View, register_view
from dash_app.views.composition_layers import (LEVELS, chosen_level, clicked_layer, layer_figure, shows_layers,
                                               side_codes)
from qkviz.explain import composition_edges

VIEW_NAME = "composition"
SIDES = {"query": "queries (Q)", "key": "keys (K)", "value": "values (V)"}
#: the sides whose weights share a unit (a logit; a length moved), ranked, filtered and drawn wide apart
UNITS = (("query", "key"), ("value",))
#: purple, beside the queries' green and the keys' pink (the same Dark2 palette)
VALUE_COLOUR = "#7570b3"
COLOURS = {"query": QUERY_COLOUR, "key": KEY_COLOUR, "value": VALUE_COLOUR}
WEIGHTS = {"contribution": "contribution", "lift": "lift over the other keys"}
DEFAULT_TOP = 60
MAX_TOP = 5000
MAX_MINIMUM = 1e6
#: an edge meets its target this far left (queries) or right (keys) of the node's centre, in head columns, or
#: above it (values), in layers
SIDE_OFFSET = {"query": -0.18, "key": 0.18, "value": 0.0}
LAYER_OFFSET = {"query": 0.0, "key": 0.0, "value": -0.25}
#: edges are drawn in this many widths (one trace per side, width and sign)
WIDTH_STEPS = 4
GRAPH_HEIGHT = "calc(100vh - 190px)"
MIN_HEIGHT_PX = 480
ALL = -1


def layout(_context: AppContext) -> html.Div:
    return html.Div(id=ids.COMPOSITION_VIEW, style={"display": "none"}, children=[
        html.Div(className="controls", children=[
            html.Label("Edges into"),
            dcc.Checklist(id=ids.COMPOSITION_SIDE, options=[{"label": text, "value": value}
                                                            for value, text in SIDES.items()],
                          value=list(SIDES), inline=True),
            html.Label("weight"),
            dcc.RadioItems(id=ids.COMPOSITION_BY, options=[{"label": text, "value": value}
                                                           for value, text in WEIGHTS.items()],
                           value="contribution", inline=True),
            html.Label("Q/K |weight| ≥"),
            dcc.Input(id=ids.COMPOSITION_MINIMUM, type="number", min=0, step="any", value=0, style={"width": "70px"}),
            html.Label("V |weight| ≥"),
            dcc.Input(id=ids.COMPOSITION_VALUE_MINIMUM, type="number", min=0, step="any", value=0,
                      style={"width": "70px"}),
            html.Label("strongest"),
            dcc.Input(id=ids.COMPOSITION_TOP, type="number", min=1, max=MAX_TOP, step=1, value=DEFAULT_TOP,
                      style={"width": "70px"}),
            html.Label("only layer"),
            # "all" offered from the start (the run's layers and heads come with the first drawing): a dropdown
            # whose value is not among its options clears it, which would draw the view before its graph is in
            # the page (dash_app.deferred_graphs)
            dcc.Dropdown(id=ids.COMPOSITION_LAYERS, options=focus_options(0, "layers"), value=ALL, clearable=False,
                         style={"width": "130px"}),
            html.Label("head"),
            dcc.Dropdown(id=ids.COMPOSITION_HEAD, options=focus_options(0, "heads"), value=ALL, clearable=False,
                         style={"width": "130px"}),
            html.Label("show"),
            dcc.RadioItems(id=ids.COMPOSITION_LEVEL, options=[{"label": text, "value": value}
                                                              for value, text in LEVELS.items()],
                           value="auto", inline=True),
            export_buttons(ids.COMPOSITION_GRAPH, "composition"),
        ]),
        html.Div(id=ids.COMPOSITION_MESSAGE, className="info"),
        dcc.Graph(id=ids.COMPOSITION_GRAPH, config=image_config("composition"),
                  style=graph_style(True), figure=BLANK_FIGURE),
        dcc.Graph(id=ids.COMPOSITION_LAYER_GRAPH, config=image_config("composition-layers"),
                  style=graph_style(False), figure=BLANK_FIGURE),
    ])


def graph_style(shown: bool) -> dict:
    return {"height": GRAPH_HEIGHT, "minHeight": f"{MIN_HEIGHT_PX}px", **({} if shown else {"display": "none"})}


def missing_circuits_message(data: RunData) -> str:
    return (f"No circuits are stored for run {data.name} yet: make them with 'qkviz stats --run {data.run.path} "
            "--circuits' (it runs the run's model over a sample of the run), then open this view again.")


def focus_options(count: int, name: str) -> list[dict]:
    return [{"label": f"all {name}", "value": ALL}, *({"label": str(i), "value": i} for i in range(count))]


def chosen(value, count: int) -> int:
    """A focus dropdown's value as the server takes it: a layer or head in range, else :data:`ALL`."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < count else ALL


def chosen_sides(value) -> tuple[str, ...]:
    """The side checklist's value as the server takes it: the known sides ticked (none: no edges); a single side's
    name, or ``"both"`` (queries and keys), as the radio buttons before the value side sent it; anything else every
    side."""
    if isinstance(value, list):
        return tuple(side for side in SIDES if side in value)
    if value == "both":
        return ("query", "key")
    return (value,) if isinstance(value, str) and value in SIDES else tuple(SIDES)


def chosen_edges(circuits: pd.DataFrame, side, by: str, minimum: float, top: int, layer: int, head: int,
                 value_minimum: float = 0.0) -> pd.DataFrame:
    """The edges drawn: of the sides ``side`` names (:func:`chosen_sides`), ``|weight| >= minimum`` for Q/K edges and
    ``>= value_minimum`` for V-edges, touching the focus (``layer`` / ``head``, :data:`ALL` for any) as source or
    target, the ``top`` strongest Q/K edges and the ``top`` strongest V-edges."""
    return filtered_edges(composition_edges(circuits, by=by), side, minimum, top, layer, head, value_minimum)


def passing_edges(edges: pd.DataFrame, side, minimum: float, value_minimum: float = 0.0) -> pd.DataFrame:
    """Of ``edges`` (every edge, largest first), those of the sides ``side`` names whose ``|weight|`` reaches its
    unit's minimum (``minimum`` for Q/K, ``value_minimum`` for V)."""
    return edges[passing_mask(edges, side, minimum, value_minimum)]


def passing_mask(edges: pd.DataFrame, side, minimum: float, value_minimum: float = 0.0) -> np.ndarray:
    """bool per edge: whether :func:`passing_edges` keeps it (the layer matrix sums the edges it marks without
    copying them)."""
    sides = chosen_sides(side)
    order = tuple(name for unit in UNITS for name in unit)
    codes = side_codes(edges.side, order)                       # -1, the arrays' last: a side not in UNITS
    chosen = np.array([name in sides for name in order] + [False])
    minimums = np.array([value_minimum if name == "value" else minimum for name in order] + [0.0], dtype=np.float64)
    return chosen[codes] & (np.abs(edges.weight.to_numpy(dtype=np.float64)) >= minimums[codes])


def filtered_edges(edges: pd.DataFrame, side, minimum: float, top: int, layer: int, head: int,
                   value_minimum: float = 0.0) -> pd.DataFrame:
    """:func:`chosen_edges` of ``edges`` already made (every edge, largest first)."""
    edges = passing_edges(edges, side, minimum, value_minimum)
    if layer != ALL or head != ALL:
        def inside(layers, heads):
            keep = np.ones(len(edges), dtype=bool)
            if layer != ALL:
                keep &= layers.to_numpy() == layer
            if head != ALL:
                keep &= heads.to_numpy() == head
            return keep
        edges = edges[inside(edges.source_layer, edges.source_head) | inside(edges.target_layer, edges.target_head)]
    edges = pd.concat([edges[edges.side.isin(unit)].head(top) for unit in UNITS]).reset_index(drop=True)
    return edges.astype({"side": object}) if isinstance(edges.side.dtype, pd.CategoricalDtype) else edges


def node_position(layer, head, n_heads: int) -> tuple:
    """x and y of a node: a head's column, an MLP's (``head`` -1) the column after the heads; layers down."""
    head = np.asarray(head)
    return np.where(head < 0, n_heads + 0.5, head), np.asarray(layer)


def edge_traces(edges: pd.DataFrame, n_heads: int) -> list[go.Scatter]:
    """The edges as lines, one trace per side, width step and sign; and one hover marker per edge, where it meets
    its target."""
    if edges.empty:
        return []
    strength = edges.weight.abs().to_numpy()
    largest = edges.weight.abs().groupby(edges.side.map({side: unit for unit in UNITS for side in unit})) \
        .transform("max").to_numpy()                          # widths within each unit: a logit, a length moved
    steps = np.minimum((strength / np.maximum(largest, 1e-300) * WIDTH_STEPS).astype(int), WIDTH_STEPS - 1)
    x0, y0 = node_position(edges.source_layer, edges.source_head, n_heads)
    x1 = edges.target_head.to_numpy() + edges.side.map(SIDE_OFFSET).to_numpy()
    y1 = edges.target_layer.to_numpy() + edges.side.map(LAYER_OFFSET).to_numpy()
    traces = []
    for side, colour in COLOURS.items():
        for step in range(WIDTH_STEPS):
            for negative in (False, True):
                rows = np.flatnonzero((edges.side.to_numpy() == side) & (steps == step)
                                      & ((edges.weight.to_numpy() < 0) == negative))
                if not len(rows):
                    continue
                xs = np.column_stack([x0[rows], x1[rows], np.full(len(rows), np.nan)]).ravel()
                ys = np.column_stack([y0[rows], y1[rows], np.full(len(rows), np.nan)]).ravel()
                traces.append(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                         opacity=0.25 + 0.75 * (step + 1) / WIDTH_STEPS, name=f"{side} edges",
                                         line=dict(color=colour, width=1 + 1.5 * step,
                                                   dash="dot" if negative else "solid")))
    into = edges.side.map({"query": "queries", "key": "keys", "value": "values (share of the length moved)"})
    texts = [f"{source} → L{layer}H{head} {side}: {weight:+.3f}" for source, layer, head, side, weight
             in zip(edges.source, edges.target_layer, edges.target_head, into, edges.weight)]
    traces.append(go.Scatter(x=x1, y=y1, mode="markers", hovertext=texts, hoverinfo="text", showlegend=False,
                             name="edge ends", marker=dict(size=6, color=edges.side.map(COLOURS).to_numpy())))
    return traces


def head_hovers(circuits: pd.DataFrame, n_layers: int, n_heads: int) -> list[str]:
    """Each head node's hover: its mean partner logit and mean length moved, where the circuits hold them (read from
    each head's first row: a 1,024-head table has 1.6 million rows, so this is worked out once per run)."""
    flat = circuits.layer.to_numpy(dtype=np.int64) * n_heads + circuits["head"].to_numpy(dtype=np.int64)
    heads, first = np.unique(flat, return_index=True)
    totals = {name: dict(zip(heads.tolist(), circuits[name].to_numpy()[first].tolist()))
              for name in ("mean_logit", "mean_moved") if name in circuits}
    logits, moved = totals.get("mean_logit", {}), totals.get("mean_moved", {})
    return [f"L{index // n_heads} H{index % n_heads}"
            + (f" · mean partner logit {logits[index]:+.2f}" if index in logits else "")
            + (f" · mean length moved {moved[index]:.2f}" if index in moved and moved[index] == moved[index] else "")
            + " · click to open" for index in range(n_layers * n_heads)]


def composition_figure(edges: pd.DataFrame, circuits: pd.DataFrame, n_layers: int, n_heads: int, by: str,
                       current: tuple[int, int], hover: list[str] | None = None) -> go.Figure:
    """Head nodes (``customdata``: the flat head; hover: :func:`head_hovers`, given or worked out), MLP nodes, the
    edges, the open head ringed."""
    layers, heads = np.divmod(np.arange(n_layers * n_heads), n_heads)
    hover = head_hovers(circuits, n_layers, n_heads) if hover is None else hover
    mlp_layers = np.arange(n_layers)
    traces = [*edge_traces(edges, n_heads),
              go.Scatter(x=np.full(n_layers, n_heads + 0.5), y=mlp_layers, mode="markers+text", name="MLPs",
                         text=[f"L{layer}.mlp" for layer in mlp_layers], textposition="middle right",
                         textfont=dict(size=9, color="#666"), hoverinfo="text", showlegend=False,
                         marker=dict(size=12, symbol="square", color="#bbbbbb", line=dict(color="#666", width=1))),
              go.Scatter(x=heads, y=layers, mode="markers", customdata=np.arange(n_layers * n_heads), hovertext=hover,
                         hoverinfo="text", name="heads", showlegend=False,
                         marker=dict(size=16, color="white", line=dict(color="#333", width=1.5))),
              go.Scatter(x=[current[1]], y=[current[0]], mode="markers", hoverinfo="skip", showlegend=False,
                         name="open head", marker=dict(size=24, color="rgba(0,0,0,0)",
                                                       line=dict(color="#222", width=2)))]
    figure = go.Figure(traces)
    figure.update_layout(
        autosize=True, plot_bgcolor="white", hovermode="closest", margin=dict(l=60, r=80, t=50, b=50),
        title=dict(text=f"Composition: edges from earlier heads and MLPs into each head's queries (green, left), "
                        f"keys (pink, right) and values (purple, top), by {WEIGHTS[by]}; dotted: negative",
                   font=dict(size=13)),
        xaxis=dict(title="head", tickmode="array", tickvals=[*range(n_heads), n_heads + 0.5],
                   ticktext=[*map(str, range(n_heads)), "MLP"], range=[-0.7, n_heads + 1.6], zeroline=False,
                   showgrid=False),
        yaxis=dict(title="layer", autorange="reversed", dtick=1, zeroline=False, showgrid=True, gridcolor="#f0f0f0"),
        uirevision="composition")
    return figure


def render_composition(data: RunData, circuits: pd.DataFrame | None, current: tuple[int, int], side, by, minimum,
                       top, layer, head, value_minimum=0, level="heads", edges: pd.DataFrame | None = None,
                       hover: list[str] | None = None) -> tuple[go.Figure, str]:
    """The figure and the line above it, the controls' values checked here: the head graph, or the layer matrix
    where :func:`~dash_app.views.composition_layers.shows_layers` says so (``level``). ``edges``: the run's every
    edge by ``by``, largest first, where the caller keeps them."""
    if data.patches is not None:
        return message_figure(), "The composition view is for text runs (attribution splits text runs' logits)."
    if circuits is None:
        return message_figure(), missing_circuits_message(data)
    sides = chosen_sides(side)
    by = by if isinstance(by, str) and by in WEIGHTS else "contribution"
    minimum = bounded_number(minimum, 0.0, 0.0, MAX_MINIMUM)
    value_minimum = bounded_number(value_minimum, 0.0, 0.0, MAX_MINIMUM)
    top = bounded_number(top, DEFAULT_TOP, 1, MAX_TOP, whole=True)
    n_layers, n_heads = data.run.n_layers, data.run.n_heads
    layer, head = chosen(layer, n_layers), chosen(head, n_heads)
    edges = composition_edges(circuits, by=by) if edges is None else edges
    sample = circuits.attrs.get("sample", {})
    measured = f" (circuits over {sample['n_tokens']:,} tokens)" if isinstance(sample, dict) and "n_tokens" in sample \
        else ""
    if shows_layers(chosen_level(level), n_layers, n_heads, layer, head, ALL):
        passing = passing_mask(edges, list(sides), minimum, value_minimum)
        message = (f"{n_layers} x {n_layers} layers, {n_layers * n_heads:,} heads: the summed |{by}| of "
                   f"{int(passing.sum()):,} edges (Q/K |{by}| ≥ {minimum:g}, V ≥ {value_minimum:g}){measured}. Click a cell "
                   "to open its target layer, or pick a layer or head above.")
        return layer_figure(edges, n_layers, sides, by, passing), message
    edges = filtered_edges(edges, list(sides), minimum, top, layer, head, value_minimum)
    counts = edges.side.isin(UNITS[0]).sum(), (edges.side == "value").sum()
    message = (f"{len(edges):,} edges drawn: the strongest {counts[0]:,} Q/K edges of |{by}| ≥ {minimum:g} and "
               f"{counts[1]:,} V-edges of |{by}| ≥ {value_minimum:g}{measured}. Hover an edge's end for its weight; "
               "click a head to open it.")
    if "value" in sides and by == "lift":
        message += " V-edges have no lift (no softmax acts on the values): weigh by contribution to see them."
    elif "value" in sides and not (circuits.side == "value").any():
        message += " These circuits have no value side: make them again with 'qkviz stats --circuits'."
    return composition_figure(edges, circuits, n_layers, n_heads, by, current, hover), message


def register(app: dash.Dash, context: AppContext) -> None:
    """Draw the graph when the view opens or a control changes (the circuits read once per run, when stored, and
    their every edge worked out once per weight); a click on the layer matrix opens its target layer."""
    runs = context.runs
    read: dict[int, pd.DataFrame] = {}
    every_edge: dict[tuple[int, str], pd.DataFrame] = {}
    hovers: dict[int, list[str]] = {}

    def circuits_of(run: int) -> pd.DataFrame | None:
        if run not in read and runs[run].patches is None:
            table = runs[run].run.circuits
            if table is not None:
                read[run] = table
        return read.get(run)

    def edges_of(run: int, by) -> pd.DataFrame | None:
        circuits = circuits_of(run)
        by = by if isinstance(by, str) and by in WEIGHTS else "contribution"
        if circuits is None:
            return None
        if (run, by) not in every_edge:     # a category: a million edges' side compared as codes
            every_edge[(run, by)] = composition_edges(circuits, by=by).astype({"side": "category"})
        return every_edge[(run, by)]

    def hovers_of(run: int) -> list[str] | None:
        circuits = circuits_of(run)
        if circuits is not None and run not in hovers:
            hovers[run] = head_hovers(circuits, runs[run].run.n_layers, runs[run].run.n_heads)
        return hovers.get(run)

    @app.callback(Output(ids.COMPOSITION_GRAPH, "figure"), Output(ids.COMPOSITION_MESSAGE, "children"),
                  Output(ids.COMPOSITION_LAYERS, "options"), Output(ids.COMPOSITION_HEAD, "options"),
                  Output(ids.COMPOSITION_LAYER_GRAPH, "figure"), Output(ids.COMPOSITION_GRAPH, "style"),
                  Output(ids.COMPOSITION_LAYER_GRAPH, "style"),
                  Input(VIEW.state_store, "data"), Input(ids.COMPOSITION_SIDE, "value"),
                  Input(ids.COMPOSITION_BY, "value"), Input(ids.COMPOSITION_MINIMUM, "value"),
                  Input(ids.COMPOSITION_TOP, "value"), Input(ids.COMPOSITION_LAYERS, "value"),
                  Input(ids.COMPOSITION_HEAD, "value"), Input(ids.COMPOSITION_VALUE_MINIMUM, "value"),
                  Input(ids.COMPOSITION_LEVEL, "value"), prevent_initial_call=True)
    def draw_composition(current, side, by, minimum, top, layer, head, value_minimum, level):
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        data = runs[state.run]
        n_layers, n_heads, circuits = data.run.n_layers, data.run.n_heads, circuits_of(state.run)
        figure, message = render_composition(data, circuits, (state.layer, state.head), side, by, minimum, top, layer,
                                             head, value_minimum, level, edges_of(state.run, by), hovers_of(state.run))
        layers = circuits is not None and data.patches is None and shows_layers(
            chosen_level(level), n_layers, n_heads, chosen(layer, n_layers), chosen(head, n_heads), ALL)
        options = (focus_options(n_layers, "layers"), focus_options(n_heads, "heads"))
        if layers:
            return dash.no_update, message, *options, figure, graph_style(False), graph_style(True)
        return figure, message, *options, dash.no_update, graph_style(True), graph_style(False)

    @app.callback(Output(ids.COMPOSITION_LAYERS, "value"), Input(ids.COMPOSITION_LAYER_GRAPH, "clickData"),
                  State(VIEW.state_store, "data"), prevent_initial_call=True)
    def open_clicked_layer(click, current):
        state = checked_state(current, runs)
        layer = clicked_layer(click, runs[state.run].run.n_layers)
        if layer is None:
            raise PreventUpdate
        return layer


def offered(context: AppContext) -> bool:
    """A tab when some run is a text run (the page says how to make the circuits when they are not stored)."""
    return any(data.patches is None for data in context.runs)


VIEW = register_view(View(
    name=VIEW_NAME, label="Composition", order=55, layout=layout, register=register, offered=offered,
    point_events={ids.COMPOSITION_CLICK: (ids.COMPOSITION_GRAPH, "clickData")},
    actions={(ids.COMPOSITION_CLICK, "data"): open_clicked_head}))
