"""Compare view: the same head of two runs over the same tokens side by side, and how much each head's
attention changed from one to the other.

Shown as a tab when the app serves two or more comparable runs (the same tokens and heads, see
:mod:`dash_app.data.attention_changes`; ``qkviz serve --run A --run B``). At the top, the per-head table of
:func:`qkviz.attention_change` (mean JS distance of every query's attention) as a layers x heads heatmap and
a table of the most changed heads -- "being computed" until the start-up thread has it; a click on a cell
opens that head below. Below, the head's 2D layout in each run (the top bar's method where both runs have
it, else PCA), points identified by ``customdata`` as in the single view (query ``t`` is ``t``, key ``t`` is
``n_tokens + t``). Hover and selection are linked clientside (``linkHover`` and ``linkSelection`` in
``assets/selection_compare.js``): hovering a token rings it in both figures, a lasso or box selection in one
selects the same points in the other.
"""

from __future__ import annotations

import dash
import numpy as np
import plotly.graph_objects as go
from dash import ClientsideFunction, Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.data.attention_changes import AttentionChanges
from dash_app.state.events import NAMESPACE
from dash_app.figure_parts import KEY_COLOUR, QUERY_COLOUR, message_figure
from dash_app.data.run_data import RunData
from dash_app.state.view_state import checked_state
from dash_app.state.view_registry import AppContext, View, register_view
from qkviz import QkvizError
from qkviz.analysis import most_changed
from qkviz.projection import FIRST_METHOD, method_label

#: rows of the most-changed table
TABLE_ROWS = 20
#: the heatmap's colour scale, white (unchanged) to dark red
CHANGE_SCALE = [[0.0, "#fff5f0"], [0.5, "#fb6a4a"], [1.0, "#67000d"]]
#: how often the page asks whether the attention change is computed, until it is
POLL_MS = 1000


def layout(context: AppContext) -> html.Div:
    """The view's container (hidden unless the state shows it): the pair and head pickers, the change heatmap
    and table, the two figures; the first comparable pair chosen."""
    runs, changes = context.runs, context.changes
    first = changes.pairs[0] if changes.pairs else (0, 0)
    run_options = [{"label": data.name, "value": index} for index, data in enumerate(runs)]
    dropdown = lambda id_, value, options, width: dcc.Dropdown(  # noqa: E731
        id=id_, options=options, value=value, clearable=False, style={"width": width})
    shape = runs[first[0]].run
    return html.Div(id=ids.COMPARE_VIEW, style={"display": "none"}, children=[
        dcc.Store(id=ids.COMPARE_LINK_SINK),
        # started by the view's first drawing (show_change) when the change is still being computed
        dcc.Interval(id=ids.COMPARE_POLL, interval=POLL_MS, disabled=True),
        html.Div(className="controls", children=[
            html.Label("Run A"), dropdown(ids.COMPARE_RUN_A, first[0], run_options, "180px"),
            html.Label("Run B"), dropdown(ids.COMPARE_RUN_B, first[1], run_options, "180px"),
            html.Label("Layer"), dropdown(ids.COMPARE_LAYER, 0, _numbers(shape.n_layers), "90px"),
            html.Label("Head"), dropdown(ids.COMPARE_HEAD, 0, _numbers(shape.n_heads), "90px"),
        ]),
        html.Div(id=ids.COMPARE_STATUS, className="info"),
        html.Div(className="compare-change", children=[
            dcc.Graph(id=ids.COMPARE_HEATMAP, config={"displaylogo": False}, figure=message_figure(),
                      style={"flex": "1 1 50%", "minWidth": "0"}),
            html.Div(id=ids.COMPARE_TABLE, className="compare-table"),
        ]),
        html.Div(className="compare-pair", children=[
            dcc.Graph(id=graph, config={"displaylogo": False}, clear_on_unhover=True, figure=message_figure(),
                      style={"flex": "1 1 50%", "minWidth": "0"})
            for graph in (ids.COMPARE_GRAPH_A, ids.COMPARE_GRAPH_B)]),
    ])


def _numbers(count: int) -> list[dict]:
    return [{"label": str(index), "value": index} for index in range(count)]


def chosen_pair(run_a, run_b, changes: AttentionChanges) -> tuple[int, int] | None:
    """The two runs the dropdowns name, when they are whole numbers naming a comparable pair; else None."""
    valid = all(isinstance(value, int) and not isinstance(value, bool) for value in (run_a, run_b))
    return (run_a, run_b) if valid and changes.comparable(run_a, run_b) else None


def change_heatmap(table, n_layers: int, n_heads: int, title: str) -> go.Figure:
    """The mean JS distance per head as a layers x heads heatmap (layer 0 at the top); a cell's click opens it."""
    grid = np.full((n_layers, n_heads), np.nan)
    grid[table["layer"].to_numpy(), table["head"].to_numpy()] = table["mean_js"].to_numpy()
    figure = go.Figure(go.Heatmap(z=grid, x=list(range(n_heads)), y=list(range(n_layers)), zmin=0.0,
                                  zmax=max(float(np.nanmax(grid)), 1e-9), colorscale=CHANGE_SCALE,
                                  colorbar=dict(title=dict(text="mean JS distance", side="right"), thickness=12),
                                  hovertemplate="layer %{y} head %{x}<br>mean JS distance %{z:.4f}<extra></extra>"))
    figure.update_layout(height=max(220, 40 + 28 * n_layers), margin=dict(l=50, r=10, t=30, b=40),
                         title=dict(text=title, font=dict(size=13)), plot_bgcolor="white")
    figure.update_xaxes(title="head", dtick=1)
    figure.update_yaxes(title="layer", dtick=1, autorange="reversed")
    return figure


def change_table(table) -> html.Table:
    """The :data:`TABLE_ROWS` most changed heads: layer, head, mean and median JS distance, queries."""
    header = html.Tr([html.Th(name) for name in ("layer", "head", "mean JS", "median JS", "queries")])
    body = [html.Tr([html.Td(str(row.layer)), html.Td(str(row.head)), html.Td(f"{row.mean_js:.4f}"),
                     html.Td(f"{row.median_js:.4f}"), html.Td(f"{row.n_queries:,}")])
            for row in most_changed(table, TABLE_ROWS).itertuples()]
    return html.Table([html.Thead(header), html.Tbody(body)], className="correlations")


def shown_method(pair: list[RunData], layer: int, head: int, method: str) -> str:
    """``method`` when both runs have this head's 2D layout of it, else the first method's (PCA)."""
    return method if all(data.is_cached(layer, head, method, 2) for data in pair) else FIRST_METHOD


def pair_figure(data: RunData, layer: int, head: int, method: str) -> go.Figure:
    """One run's 2D layout of the head: traces 0 queries and 1 keys (``customdata``: joint-layout index), 2 the
    ring of the token hovered in either figure (empty; drawn clientside by ``linkHover``)."""
    coordinates = data.layout(layer, head, method, 2)
    n_tokens = data.run.n_tokens
    traces = [go.Scattergl(x=coordinates[rows, 0], y=coordinates[rows, 1], mode="markers", name=name,
                           customdata=np.arange(rows.start, rows.stop, dtype=np.int32), text=data.display_text,
                           hovertemplate=f"%{{text}}<extra>{kind}</extra>", marker=dict(color=colour, size=4, opacity=0.75))
              for rows, name, kind, colour in ((slice(0, n_tokens), "queries", "query", QUERY_COLOUR),
                                               (slice(n_tokens, 2 * n_tokens), "keys", "key", KEY_COLOUR))]
    traces.append(go.Scattergl(x=[], y=[], customdata=[], mode="markers", name="hovered", showlegend=False,
                               hoverinfo="skip", marker=dict(color="black", size=16, symbol="circle-open",
                                                             line=dict(width=3))))
    figure = go.Figure(traces)
    figure.update_layout(height=520, margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="white", hovermode="closest",
                         uirevision=f"{data.name}-{layer}-{head}-{method}",
                         title=dict(text=f"{data.name} · layer {layer} head {head} · {method_label(method)} 2D",
                                    font=dict(size=13)),
                         legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0.6))
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False, scaleanchor="x")
    return figure


def clicked_cell(click, n_layers: int, n_heads: int) -> tuple[int, int] | None:
    """``(layer, head)`` of a heatmap click (``clickData``, client input), or None when it is not one."""
    try:
        point = click["points"][0]
        layer, head = point["y"], point["x"]
    except (TypeError, KeyError, IndexError):
        return None
    valid = all(isinstance(value, int) and not isinstance(value, bool) for value in (layer, head))
    return (layer, head) if valid and 0 <= layer < n_layers and 0 <= head < n_heads else None


def change_outputs(runs: list[RunData], changes: AttentionChanges, run_a, run_b) -> tuple[str, go.Figure, object, bool]:
    """What the top of the view shows for the runs the dropdowns name (client values, checked here): the status
    line, the heatmap, the table (None until computed), and whether polling may stop (every pair is done)."""
    if not changes.pairs:
        return ("Comparing needs two runs over the same tokens with the same heads: 'qkviz serve --run A --run B'.",
                message_figure(), None, True)
    finished = all(changes.table(*pair) is not None or changes.error(*pair) is not None for pair in changes.pairs)
    pair = chosen_pair(run_a, run_b, changes)
    if pair is None:
        names = ", ".join(f"{runs[a].name} and {runs[b].name}" for a, b in changes.pairs)
        return f"Choose two runs over the same tokens: {names}.", message_figure(), None, finished
    error = changes.error(*pair)
    if error is not None:
        return f"The attention change could not be computed: {error}", message_figure(), None, finished
    table = changes.table(*pair)
    data_a, data_b = runs[pair[0]], runs[pair[1]]
    if table is None:
        return f"Attention change of {data_a.name} and {data_b.name} being computed…", message_figure(), None, False
    status = (f"How much each head's attention changed from {data_a.name} to {data_b.name}: the Jensen-Shannon "
              f"distance (base 2, 0 to 1) between the two runs' attention of each of the {data_a.run.n_tokens:,} "
              "queries, averaged per head. Click a cell to open that head below.")
    title = f"mean JS distance, {data_a.name} → {data_b.name}"
    return (status, change_heatmap(table, data_a.run.n_layers, data_a.run.n_heads, title), change_table(table),
            finished)


def comparable(context: AppContext) -> bool:
    """Whether the tab is offered: two of the runs are over the same tokens with the same heads."""
    return bool(context.changes.pairs)


def pair_figures(shown: list, layer, head, method: str) -> tuple:
    """The head ``(layer, head)`` in each of the two runs ``shown`` (PreventUpdate for a head neither has), or the
    refusal's message in both."""
    n_layers, n_heads = shown[0].run.n_layers, shown[0].run.n_heads
    valid = all(isinstance(value, int) and not isinstance(value, bool) for value in (layer, head))
    if not (valid and 0 <= layer < n_layers and 0 <= head < n_heads):
        raise PreventUpdate
    method = shown_method(shown, layer, head, method)
    try:
        return tuple(pair_figure(data, layer, head, method) for data in shown)
    except QkvizError as error:
        return message_figure(str(error)), message_figure(str(error))


def register(app: dash.Dash, context: AppContext) -> None:
    """The change table and heatmap (drawn when the view first shows, then polled until computed), a cell's click,
    the two figures, and the clientside links of hover and selection."""
    runs, changes = context.runs, context.changes

    # not when the page loads: the heatmap enters the page when the view first shows (dash_app.deferred_graphs), in
    # the answer that writes the view's state, which draws it
    @app.callback(Output(ids.COMPARE_STATUS, "children"), Output(ids.COMPARE_HEATMAP, "figure"),
                  Output(ids.COMPARE_TABLE, "children"), Output(ids.COMPARE_POLL, "disabled"),
                  Input(VIEW.state_store, "data"), Input(ids.COMPARE_POLL, "n_intervals"),
                  Input(ids.COMPARE_RUN_A, "value"), Input(ids.COMPARE_RUN_B, "value"),
                  State(ids.COMPARE_TABLE, "children"), prevent_initial_call=True)
    def show_change(_current, _tick, run_a, run_b, shown_table):
        status, heatmap, table, finished = change_outputs(runs, changes, run_a, run_b)
        redrawn_by_choice = dash.ctx.triggered_id in (ids.COMPARE_RUN_A, ids.COMPARE_RUN_B)
        if not redrawn_by_choice and table is not None and shown_table:
            # drawn already: a poll for other pairs, or the view shown again, redraws nothing
            return no_update, no_update, no_update, finished
        return status, heatmap, table, finished

    @app.callback(Output(ids.COMPARE_LAYER, "options"), Output(ids.COMPARE_HEAD, "options"),
                  Input(ids.COMPARE_RUN_A, "value"), Input(ids.COMPARE_RUN_B, "value"), prevent_initial_call=True)
    def head_options(run_a, run_b):
        pair = chosen_pair(run_a, run_b, changes)
        if pair is None:
            raise PreventUpdate
        return _numbers(runs[pair[0]].run.n_layers), _numbers(runs[pair[0]].run.n_heads)

    @app.callback(Output(ids.COMPARE_LAYER, "value"), Output(ids.COMPARE_HEAD, "value"),
                  Input(ids.COMPARE_HEATMAP, "clickData"), State(ids.COMPARE_RUN_A, "value"),
                  State(ids.COMPARE_RUN_B, "value"), prevent_initial_call=True)
    def open_cell(click, run_a, run_b):
        pair = chosen_pair(run_a, run_b, changes)
        cell = None if pair is None else clicked_cell(click, runs[pair[0]].run.n_layers, runs[pair[0]].run.n_heads)
        if cell is None:
            raise PreventUpdate
        return cell

    @app.callback(Output(ids.COMPARE_GRAPH_A, "figure"), Output(ids.COMPARE_GRAPH_B, "figure"),
                  Input(ids.COMPARE_RUN_A, "value"), Input(ids.COMPARE_RUN_B, "value"),
                  Input(ids.COMPARE_LAYER, "value"), Input(ids.COMPARE_HEAD, "value"), Input(VIEW.state_store, "data"),
                  prevent_initial_call=True)
    def draw_pair(run_a, run_b, layer, head, current):
        state = checked_state(current, runs)
        pair = chosen_pair(run_a, run_b, changes)
        if current is None or state.view != VIEW.name or pair is None:
            raise PreventUpdate
        return pair_figures([runs[index] for index in pair], layer, head, state.method)

    graphs = (State(ids.COMPARE_GRAPH_A, "id"), State(ids.COMPARE_GRAPH_B, "id"))
    app.clientside_callback(ClientsideFunction(NAMESPACE, "linkHover"), Output(ids.COMPARE_LINK_SINK, "data"),
                            Input(ids.COMPARE_GRAPH_A, "hoverData"), Input(ids.COMPARE_GRAPH_B, "hoverData"), *graphs,
                            prevent_initial_call=True)
    app.clientside_callback(ClientsideFunction(NAMESPACE, "linkSelection"),
                            Output(ids.COMPARE_LINK_SINK, "data", allow_duplicate=True),
                            Input(ids.COMPARE_GRAPH_A, "selectedData"), Input(ids.COMPARE_GRAPH_B, "selectedData"),
                            *graphs, prevent_initial_call=True)


VIEW = register_view(View(name="compare", label="Compare", order=60, layout=layout, register=register, offered=comparable))
