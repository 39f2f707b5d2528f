"""Single-head view: one head's queries and keys in a WebGL scatter (2D) or a 3D scatter.

Arrays go to Plotly as numpy (float32 colours, int32 ``customdata``; 2D coordinates as uint16 steps of the
layout's extent, see :func:`~dash_app.views.single_figure.to_steps`), which Plotly serialises as typed arrays
(base64), not lists. ``customdata`` is the point's index in the
head's joint layout (query ``t`` is ``t``, key ``t`` is ``n_tokens + t``); hover shows the token,
and the detail panel (a hover callback) its sentence, position and colour value.

Traces sit in fixed slots so a click can replace only the overlays (a ``Patch``): 0 queries,
1 keys, 2 / 3 search matches (queries / keys), 4 / 5 the clicked point's sentence (queries /
keys), 6 .. 6 + OPACITY_STEPS - 1 attention lines by opacity step, then the clicked point, then its
corpus-wide partners (:mod:`dash_app.panels.partners`).

The figure itself is :mod:`dash_app.views.single_figure`'s. Beside it, the side panels of :mod:`dash_app.panels`
(head atlas, corpus partners, related heads).
:func:`register` adds the callbacks that draw the figure and fill the panels, and the clientside
relays of clicks and hovers.
"""

from __future__ import annotations

import dash
import numpy as np
import plotly.graph_objects as go
from dash import ClientsideFunction, Input, Output, Patch, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.state.control_options import colour_options, head_options, layer_options, weighting_options, weighting_switch
from dash_app.state.events import NAMESPACE, clicked, select_clicked_point, show_view, step
from dash_app.data.image_patches import PATCH_PX
from dash_app.export import export_buttons, image_config
from dash_app.figure_parts import BLANK_FIGURE, OPACITY_STEPS, message_figure
from dash_app.panels import ablation as ablation_panel
from dash_app.panels import atlas as atlas_panel
from dash_app.panels import partners as partners_panel
from dash_app.panels import related as related_panel
from dash_app.panels import selection as selection_panel
from dash_app.panels import why as why_panel
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState, bounded_number, checked_state, step_head, step_layer, string_list
from dash_app.state.view_registry import AppContext, View, register_view
from dash_app.views.single_figure import (KIND, base_traces, category_legend, colour_array, head_patch, norm_sizes,
                                          overlay_traces, single_figure, to_steps)
from qkviz import QkvizError
from qkviz.neighbours import goal_verdict
from qkviz.projection import FIRST_METHOD, method_label, projection_method
from qkviz.report import COLOURS, describe_value

OVERLAY_SLOTS = slice(4, 4 + 2 + OPACITY_STEPS + 2)
OPTIONS = [{"label": "size by norm", "value": "size"}, {"label": "token labels (when zoomed in)", "value": "labels"}]
#: the figure's height: the window's, less the bars above it (at least MIN_HEIGHT_PX)
GRAPH_HEIGHT = "calc(100vh - 195px)"
MIN_HEIGHT_PX = 480
DEFAULT_TOP_K = 5
MAX_TOP_K = 50
DEFAULT_THRESHOLD = 0.02
EXCERPT_CHARS = 60
NO_POINT = ("Click a point: its token, sentence and attention show here. A query, then one of its keys: why they "
            "meet (or lasso queries and keys).")
VIEW_NAME = "single"
NO_MATCHES = np.zeros(0, dtype=np.int64)
#: the fields of the figure's key (run, method, dimension, colour, search, substring, options) that, when
#: unchanged, leave the same traces with the same texts and ids: a head switch then sends a ``head_patch``
SAME_TOKENS_KEY = (0, 3, 4, 5, 6, 7, 8)


def layout(context: AppContext) -> html.Div:
    button = lambda id_, text, title: html.Button(text, id=id_, title=title, n_clicks=0)  # noqa: E731
    return html.Div(id=ids.SINGLE_VIEW, style={"display": "none"}, children=[
        html.Div(className="controls", children=[
            html.Label("Layer"), dcc.Dropdown(id=ids.LAYER_SELECT, clearable=False, style={"width": "90px"}),
            html.Label("Head"), dcc.Dropdown(id=ids.HEAD_SELECT, clearable=False, style={"width": "90px"}),
            button(ids.PREV_HEAD, "◀ head", "previous head"), button(ids.NEXT_HEAD, "head ▶", "next head"),
            button(ids.LAYER_UP, "▲ layer", "one layer up"), button(ids.LAYER_DOWN, "layer ▼", "one layer down"),
            export_buttons(ids.SINGLE_GRAPH, "single-head"),
            html.Label("Colour"),
            dcc.Dropdown(id=ids.COLOUR_SELECT, clearable=False, style={"width": "250px"},
                         options=[{"label": label, "value": value} for value, label in COLOURS.items()]),
            dcc.Checklist(id=ids.SINGLE_OPTIONS, options=OPTIONS, value=[], inline=True),
            html.Label("lines: top"),
            dcc.Input(id=ids.TOP_K, type="number", min=1, max=MAX_TOP_K, step=1, value=DEFAULT_TOP_K, style={"width": "55px"}),
            html.Label("weight ≥"),
            dcc.Input(id=ids.THRESHOLD, type="number", min=0, max=1, step=0.01, value=DEFAULT_THRESHOLD,
                      style={"width": "70px"}),
            weighting_switch(ids.SINGLE_WEIGHTING),
        ]),
        html.Div(id=ids.SINGLE_INFO, className="info"),
        html.Div(id=ids.SINGLE_MESSAGE, className="message"),
        html.Div(className="single-body", children=[
            dcc.Graph(id=ids.SINGLE_GRAPH, config=image_config("single-head", **selection_panel.SELECT_TOOLS),
                      clear_on_unhover=True,
                      style={"flex": "1 1 auto", "minWidth": "0", "height": GRAPH_HEIGHT, "minHeight": f"{MIN_HEIGHT_PX}px"},
                      figure=BLANK_FIGURE),
            dcc.Store(id=ids.SINGLE_LABELS_SINK),
            html.Div(className="side-panel", children=[
                html.H4("Clicked point"), html.Div(id=ids.SINGLE_POINT, children=NO_POINT),
                html.Div(id=ids.SINGLE_HOVER, className="hovered"),
                *why_panel.panel(VIEW_NAME),
                html.H4("Head atlas"), html.Div(id=ids.SINGLE_ATLAS),
                html.Button("Open its sentence ▶", id=ids.OPEN_SENTENCE, n_clicks=0),
                *ablation_panel.controls(context.explanations.limits),
                *partners_panel.controls(),
                html.H4("Fidelity: correlation, partner recall@10, trust"), html.Div(id=ids.SINGLE_CORRELATION),
                html.H4("Related heads"), html.Div(id=ids.SINGLE_RELATED),
                *selection_panel.controls(),
            ]),
        ]),
    ])


# -- colours and sizes --------------------------------------------------------------------------
def standing_in(data: RunData, state: ViewState) -> bool:
    """Whether the head is drawn in PCA while its own 2D layout is being made in the background."""
    return (state.dim == 2 and not data.is_cached(state.layer, state.head, state.method, 2)
            and data.pending(state.layer, state.head, state.method) and data.is_cached(state.layer, state.head, FIRST_METHOD, 2))


def shown_layout(data: RunData, state: ViewState) -> np.ndarray:
    """The head's layout (its PCA layout while its own is being made); QkvizError saying why it is missing:
    it failed (and how), or the command that makes it."""
    if standing_in(data, state):
        return data.layout(state.layer, state.head, FIRST_METHOD, 2)
    if not data.is_cached(state.layer, state.head, state.method, state.dim):
        failure = data.layout_failure(state.layer, state.head, state.method, state.dim)
        if failure is not None:
            raise QkvizError(f"The {method_label(state.method)} {state.dim}D layout of layer {state.layer} head "
                             f"{state.head} could not be made: {failure}")
    return data.layout(state.layer, state.head, state.method, state.dim)


def layout_note(data: RunData, state: ViewState) -> str:
    """What the message line says of a head drawn in PCA meanwhile ("" otherwise)."""
    if not standing_in(data, state):
        return ""
    return (f"This head's {method_label(state.method)} layout is being made in the background; its "
            f"{method_label(FIRST_METHOD)} layout is "
            "shown until it lands (it then switches in by itself).")


def render_single(data: RunData, state: ViewState, options: list[str], matches: np.ndarray, top_k: int,
                  threshold: float, partners: np.ndarray | None = None, token_fields: bool = True) -> go.Figure:
    """The whole single-head figure for ``state``; the run's QkvizError when the layout is not cached. Without
    ``token_fields`` the queries and keys carry no texts and ids (for a :func:`head_patch` of a drawn figure)."""
    coordinates = to_steps(shown_layout(data, state))
    values = colour_array(data, state.colour, state.layer, state.head)
    sizes = norm_sizes(data.norms(state.layer, state.head)) if "size" in options else None
    base = base_traces(coordinates, data.display_text, values, state.colour, sizes, "labels" in options, matches,
                       token_fields)
    overlays = overlay_traces(data, coordinates, state.layer, state.head, state.point, top_k, threshold, partners,
                              state.weighting)
    legend = category_legend(state.colour, state.dim)
    drawn = FIRST_METHOD if standing_in(data, state) else state.method
    shown = (f"{method_label(drawn)} (waiting for {method_label(state.method)})" if drawn != state.method
             else method_label(drawn))
    title = f"{data.name} · layer {state.layer} head {state.head} · {shown} {state.dim}D"
    revision = f"{state.run}-{state.layer}-{state.head}-{state.method}-{state.dim}"
    return single_figure(base, overlays, state.dim, title, revision, coordinates, legend,
                         projection_method(drawn).axes)


def info_line(data: RunData) -> str:
    return (f"Based on {data.run.n_tokens:,} tokens ({data.run.n_sentences:,} sentences) of {data.run.model_id}; "
            "queries green, keys pink.")


def point_details(data: RunData, state: ViewState, point: int | None) -> list:
    """The Clicked point panel: token, query or key, sentence excerpt, position, colour value of ``point``
    (a joint-layout index, the state's selected point, the one the URL names and the figure rings)."""
    n_tokens = data.run.n_tokens
    if point is None or not 0 <= point < 2 * n_tokens:
        return [NO_POINT]
    token = point % n_tokens
    row = data.tokens.iloc[token]
    if data.patches is not None:
        return [*patch_details(data, point), *colour_detail(data, state, point)]
    sentence_text = data.sentences.text.iat[int(row.sentence)]
    start, end = int(row.char_start), int(row.char_end)
    if start < 0:
        excerpt = [sentence_text[:2 * EXCERPT_CHARS]]
    else:
        excerpt = [("…" if start > EXCERPT_CHARS else "") + sentence_text[max(0, start - EXCERPT_CHARS):start],
                   html.B(sentence_text[start:end]),
                   sentence_text[end:end + EXCERPT_CHARS] + ("…" if end + EXCERPT_CHARS < len(sentence_text) else "")]
    details = [html.Div([html.B(str(row.token)), f"  ({'key' if point >= n_tokens else 'query'})"]),
               html.Div(f"sentence {int(row.sentence)}, position {int(row.position)}"),
               html.Div(excerpt, className="excerpt")]
    return [*details, *colour_detail(data, state, point)]


def colour_detail(data: RunData, state: ViewState, point: int) -> list:
    """The point's value of the colour feature, as a line (none when colouring by query / key)."""
    if state.colour == "type":
        return []
    value = (data.norms(state.layer, state.head)[point] if state.colour == "norm"
             else data.features[state.colour].iat[point % data.run.n_tokens])
    return [html.Div(f"{COLOURS[state.colour]}: {describe_value(state.colour, float(value))}")]


def patch_details(data: RunData, point: int) -> list:
    """An image run's point: its patch as the model saw it, enlarged, and where it sits (image, row, column)."""
    n_tokens = data.run.n_tokens
    token = point % n_tokens
    row = data.tokens.iloc[token]
    image = int(row.sentence)
    place = (f"patch row {int(row.patch_row)}, column {int(row.patch_col)}" if row.patch_row >= 0
             else "a special token (no patch)")
    return [html.Div([html.Img(src=data.patches.patch_uri(token), className="patch-thumbnail",
                               style={"imageRendering": "pixelated", "width": f"{PATCH_PX}px", "height": f"{PATCH_PX}px"}),
                      html.B(f" {row.token}"), f"  ({KIND[int(point >= n_tokens)]})"]),
            html.Div(f"image {image}: {data.sentences.text.iat[image]}"), html.Div(place)]


def hovered_line(data: RunData, point: int | None, selected: int | None):
    """The line under the panel naming the point under the mouse, when it is not the clicked one (an image run's:
    with its patch)."""
    n_tokens = data.run.n_tokens
    if point is None or point == selected or not 0 <= point < 2 * n_tokens:
        return ""
    row = data.tokens.iloc[point % n_tokens]
    if data.patches is not None:
        return [html.Div("under the mouse:"), *patch_details(data, point)]
    return (f"under the mouse: {row.token} ({KIND[int(point >= n_tokens)]}), sentence {int(row.sentence)}, "
            f"position {int(row.position)}")


def correlation_panel(data: RunData, layer: int, head: int, method: str | None = None, dim: int = 2):
    """The report's figures for this head (a table) under the fidelity gauge of the layout shown (``method``,
    ``dim``: :func:`fidelity_gauge`), or how to make the report."""
    table = data.correlations()
    if table is None:
        return html.Div(f"No correlation report for this run yet: {report_command(data)}.")
    rows = table[(table["layer"] == layer) & (table["head"] == head)]
    if rows.empty:
        return html.Div("The report has no figures for this head.")
    header = html.Tr([html.Th(name) for name in ("space", "Pearson", "Spearman", "recall q→k", "recall k→q", "trust")])
    body = [html.Tr([html.Td(str(row.space)), html.Td(f"{row.pearson:+.3f}"), html.Td(f"{row.spearman:+.3f}"),
                     *(html.Td(_percent(getattr(row, name, None))) for name in ("recall_query", "recall_key")),
                     html.Td(_decimal(getattr(row, "trust", None)))])
            for row in rows.itertuples()]
    gauge = [] if method is None else [html.Div(fidelity_gauge(data, layer, head, method, dim), className="fidelity-gauge")]
    return html.Div([*gauge, html.Table([html.Thead(header), html.Tbody(body)], className="correlations")])


def report_command(data: RunData) -> str:
    """The command that makes the run's correlation report (and so its table of recall and trustworthiness)."""
    return f"'qkviz report --run {data.run.path} --out reports/{data.name}'"


def fidelity_gauge(data: RunData, layer: int, head: int, method: str, dim: int) -> str:
    """One line on how faithful the layout shown is, from the report: ``this layout (pca-2d): partner recall@10 31%
    (goal 30%: met), trustworthiness 0.87 (goal 0.90: not met)`` (the goals of :mod:`qkviz.neighbours`), or how to
    get the figures when the report lacks them."""
    space = f"{method}-{dim}d"
    table = data.correlations()
    if table is None:
        return f"this layout ({space}): partner recall@10 and trustworthiness not measured yet: {report_command(data)}"
    rows = table[(table["layer"] == layer) & (table["head"] == head) & (table["space"] == space)]
    if rows.empty:
        return (f"this layout ({space}): not in the report (made before this layout was cached); make the report "
                f"again: {report_command(data)}")
    row = rows.iloc[0]
    recall = (float(row["recall_query"]) + float(row["recall_key"])) / 2 if "recall_query" in rows.columns else None
    trust = float(row["trust"]) if "trust" in rows.columns else None
    line = f"this layout ({space}): {goal_verdict(recall, trust)}"
    if recall is None or trust is None:            # a report made before the column existed
        line += f"; make the report again to measure it: {report_command(data)}"
    return line


def _percent(value) -> str:
    return "–" if value is None or value != value else f"{value:.0%}"


def _decimal(value) -> str:
    return "–" if value is None or value != value else f"{value:.2f}"


def same_but_head(drawn: list, key: list) -> bool:
    """Whether two single-figure keys (``base_key`` of :func:`register`) differ at most in the head shown: the
    same run, method, dimension, colour, search and options (the same traces, texts and ids)."""
    return len(drawn) == len(key) and [drawn[i] for i in SAME_TOKENS_KEY] == [key[i] for i in SAME_TOKENS_KEY]


def overlay_patch(data: RunData, state: ViewState, top_k: int, threshold: float, partners: np.ndarray) -> Patch:
    """Only the overlay slots of a drawn figure, for a new clicked point or line settings."""
    coordinates = to_steps(shown_layout(data, state))
    patch = Patch()
    overlays = overlay_traces(data, coordinates, state.layer, state.head, state.point, top_k, threshold, partners,
                              state.weighting)
    for slot, trace in zip(range(OVERLAY_SLOTS.start, OVERLAY_SLOTS.stop), overlays):
        patch["data"][slot] = trace
    return patch


def drawn_head(data: RunData, state: ViewState, options: list, matches, top_k: int, threshold: float, partners,
               key: dict, same_tokens: bool) -> tuple:
    """The head drawn whole (or only its points' positions and colours where ``same_tokens``: another head of the
    run, drawn as before) with its side panels, or the refusal's message."""
    shown = (FIRST_METHOD, 2) if standing_in(data, state) else (state.method, state.dim)
    correlations = correlation_panel(data, state.layer, state.head, *shown)
    atlas = atlas_panel.head_panel(data, state.layer, state.head)
    related = related_panel.render_related(data, state.layer, state.head)
    try:
        figure = render_single(data, state, options, matches, top_k, threshold, partners, token_fields=not same_tokens)
    except QkvizError as error:
        return message_figure(), info_line(data), str(error), correlations, atlas, {**key, "ok": False}, related
    return (head_patch(figure) if same_tokens else figure, info_line(data), layout_note(data, state), correlations,
            atlas, {**key, "ok": True}, related)


def register(app: dash.Dash, context: AppContext) -> None:
    """Draw the head (patching only the overlays when only they changed) and its side panels; show the
    hovered point's details; label the points when zoomed in (and the panels' own callbacks and relays)."""
    runs, searches = context.runs, context.searches

    @app.callback(Output(ids.SINGLE_GRAPH, "figure"), Output(ids.SINGLE_INFO, "children"),
                  Output(ids.SINGLE_MESSAGE, "children"), Output(ids.SINGLE_CORRELATION, "children"),
                  Output(ids.SINGLE_ATLAS, "children"), Output(ids.SINGLE_RENDERED, "data"),
                  Output(ids.SINGLE_RELATED, "children"),
                  Input(VIEW.state_store, "data"), Input(ids.SINGLE_OPTIONS, "value"), Input(ids.TOP_K, "value"),
                  Input(ids.THRESHOLD, "value"), Input(ids.PARTNER_K, "value"), Input(ids.PARTNER_OPTIONS, "value"),
                  Input(VIEW.layout_stamp, "data"), State(ids.SINGLE_RENDERED, "data"), prevent_initial_call=True)
    def draw_single(current, options, top_k, threshold, partner_k, partner_options, _landed, rendered):
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        data = runs[state.run]
        top_k = bounded_number(top_k, DEFAULT_TOP_K, 0, MAX_TOP_K, whole=True)
        threshold = bounded_number(threshold, DEFAULT_THRESHOLD, 0.0, 1.0)
        options, partner_options = string_list(options), string_list(partner_options)
        base_key = [state.run, state.layer, state.head, state.method, state.dim, state.colour,
                    state.search.strip().lower(), state.substring, sorted(options or []), standing_in(data, state),
                    data.is_cached(state.layer, state.head, state.method, state.dim)]
        overlay_key = [state.point, top_k, threshold, partner_k, sorted(partner_options or []), state.weighting]
        partners = partners_panel.partner_points(data, state, partner_k, partner_options)
        key = {"base": base_key, "overlay": overlay_key}
        rendered = rendered if isinstance(rendered, dict) else None           # ours, or nothing
        if rendered == key:
            raise PreventUpdate
        if rendered and rendered.get("base") == base_key and rendered.get("ok"):
            return (overlay_patch(data, state, top_k, threshold, partners), no_update, no_update, no_update, no_update,
                    {**key, "ok": True}, no_update)
        # another head of the same run, layout and colouring as drawn: its points' texts and ids are kept
        same_tokens = bool(rendered and rendered.get("ok") and isinstance(rendered.get("base"), list)
                           and same_but_head(rendered["base"], base_key))
        matches = searches[state.run].matches(state.search, state.substring)
        return drawn_head(data, state, options or [], NO_MATCHES if matches is None else matches, top_k, threshold,
                          partners, key, same_tokens)

    @app.callback(Output(ids.SINGLE_POINT, "children"), Input(VIEW.state_store, "data"), prevent_initial_call=True)
    def show_point(current):
        """The state's point: the one the URL names and the figure rings (never the last point hovered)."""
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        return point_details(runs[state.run], state, state.point)

    @app.callback(Output(ids.SINGLE_HOVER, "children"), Input(ids.SINGLE_HOVER_POINT, "data"), State(ids.STATE, "data"))
    def show_hover(hover, current):
        state = checked_state(current, runs)
        target = clicked(hover)
        return hovered_line(runs[state.run], None if target is None else target[1], state.point)

    app.clientside_callback(ClientsideFunction(NAMESPACE, "labelsOnZoom"), Output(ids.SINGLE_LABELS_SINK, "data"),
                            Input(ids.SINGLE_GRAPH, "relayoutData"), Input(ids.SINGLE_GRAPH, "figure"),
                            State(ids.SINGLE_OPTIONS, "value"), State(ids.SINGLE_GRAPH, "id"))

    register_panels(app, context)


def register_panels(app: dash.Dash, context: AppContext) -> None:
    """The callbacks of the view's side panels: atlas, partners, related heads, a lasso's selection, why, ablate."""
    runs = context.runs
    atlas_panel.register(app)
    partners_panel.register(app, runs)
    related_panel.register(app)
    selection_panel.register(app, runs)
    why_panel.register(app, runs, context.explanations, VIEW_NAME, selection_store=ids.SINGLE_SELECTION)
    ablation_panel.register(app, runs, context.explanations, VIEW.state_store)


VIEW = register_view(View(
    name=VIEW_NAME, label="Single head", order=20, layout=layout, register=register,
    point_events={ids.SINGLE_CLICK: (ids.SINGLE_GRAPH, "clickData"), ids.SINGLE_HOVER_POINT: (ids.SINGLE_GRAPH, "hoverData")},
    # the panels' clicks, relayed by their own register
    stores=(ids.SINGLE_RENDERED, ids.EXEMPLAR_CLICK, ids.PARTNER_CLICK, ids.RELATED_CLICK),
    actions={(ids.SINGLE_CLICK, "data"): select_clicked_point,
             (ids.EXEMPLAR_CLICK, "data"): atlas_panel.open_clicked_exemplar,
             (ids.PARTNER_CLICK, "data"): partners_panel.select_clicked_partner,
             (ids.RELATED_CLICK, "data"): related_panel.open_clicked_related,
             (ids.PREV_HEAD, "n_clicks"): step(step_head, -1), (ids.NEXT_HEAD, "n_clicks"): step(step_head, 1),
             (ids.LAYER_UP, "n_clicks"): step(step_layer, -1), (ids.LAYER_DOWN, "n_clicks"): step(step_layer, 1),
             (ids.OPEN_SENTENCE, "n_clicks"): show_view("sentence")},
    controls={ids.LAYER_SELECT: "layer", ids.HEAD_SELECT: "head", ids.COLOUR_SELECT: "colour"},
    repeats={ids.SINGLE_WEIGHTING: "weighting"},
    options={ids.LAYER_SELECT: layer_options, ids.HEAD_SELECT: head_options, ids.COLOUR_SELECT: colour_options,
             ids.SINGLE_WEIGHTING: weighting_options}))
