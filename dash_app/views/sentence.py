"""Sentence view: one sentence's attention in one head, query tokens left, key tokens right (an image run's:
the image with a patch's attention over it, :mod:`dash_app.views.image_attention`).

Each line joins a query and a key; its opacity is the (adjusted) attention weight. Lines are
separate traces carrying ``meta = [query position, key position]``, so hovering a token shows
only its lines in the browser (``showHoveredLines`` in ``assets/clientside.js`` restyles their
visibility; no round trip). Its own layer and head selectors set the same state as the single view's.
Below it, the head's attention averaged over the corpus by (query
position, key position). The weighting switch (the state's ``weighting``) draws value-weighted attention instead:
each weight times its key's ``|W_O^h v_j|`` (``|v_j|`` in a run without output norms, and the switch says so),
every query's row rescaled to its share (:func:`qkviz.analysis.adjusted_attention`). :func:`register` adds the
callback that draws both and the clientside relays.
"""

from __future__ import annotations

import dash
import numpy as np
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from qkviz.analysis import AGGREGATE_POSITIONS, adjusted_attention, hidden_tokens, moved_norms
from dash_app.state.control_options import (head_options, layer_options, offered_sequences, run_changed, weighting_labels,
                                            weighting_options, weighting_switch)
from dash_app.state.events import clicked, relay_graph_event
from dash_app.export import export_buttons, image_config
from dash_app.figure_parts import KEY_COLOUR, LINE_COLOUR, QUERY_COLOUR, plotly_texts
from dash_app.data.run_data import RunData, RunShape
from dash_app.panels import why as why_panel
from dash_app.views import image_attention
from dash_app.state.view_state import MAX_SEARCH, ViewState, checked_state, select_point, select_sentence, string_list
from dash_app.state.view_registry import AppContext, View, register_view

OPTIONS = [{"label": "hide the first token", "value": "first"},
           {"label": "hide special tokens ([CLS], [SEP], BOS ...)", "value": "special"}]
MIN_WEIGHT = 0.02
#: sentences the selector offers at a time (typing finds others): a large run's thousands of options took
#: Dash 1-2 s to render on every page load
SENTENCES_OFFERED = 200
MAX_LINES = 400
ROW_PX = 22
#: mean attention, light (low) to dark blue: the low end a clear tint, not lost in the white page
WEIGHT_SCALE = [[0.0, "#d6e6f4"], [0.5, "#4a98c9"], [1.0, "#08306b"]]
VIEW_NAME = "sentence"


def layout(_context: AppContext) -> html.Div:
    return html.Div(id=ids.SENTENCE_VIEW, style={"display": "none"}, children=[
        html.Div(className="controls", children=[
            html.Label("Layer"), dcc.Dropdown(id=ids.SENTENCE_LAYER, clearable=False, style={"width": "80px"}),
            html.Label("Head"), dcc.Dropdown(id=ids.SENTENCE_HEAD, clearable=False, style={"width": "80px"}),
            html.Label("Sentence / image"), dcc.Dropdown(id=ids.SENTENCE_SELECT, clearable=False, style={"width": "520px"}),
            dcc.Checklist(id=ids.SENTENCE_OPTIONS, options=OPTIONS, value=[], inline=True),
            weighting_switch(ids.SENTENCE_WEIGHTING),
            export_buttons(ids.SENTENCE_GRAPH, "sentence"),
        ]),
        html.Div(id=ids.SENTENCE_MESSAGE, className="info"),
        html.Div(className="sentence-body", children=[
            dcc.Graph(id=ids.SENTENCE_GRAPH, config={"displayModeBar": False}, clear_on_unhover=True,
                      figure={"data": [], "layout": {"height": 100}}),
            html.Div(children=why_panel.panel(VIEW_NAME)),
            dcc.Graph(id=ids.AGGREGATE_GRAPH, config=image_config("mean-attention"),
                      figure={"data": [], "layout": {"height": 100}}),
        ]),
        dcc.Store(id=ids.SENTENCE_HOVER_SINK),
    ])


def sentence_options(data: RunData, typed: str = "", current: int | None = None,
                     limit: int = SENTENCES_OFFERED) -> list[dict]:
    """Dropdown options ``"12: The match was delayed ..."``: the first ``limit`` sentences whose text holds
    ``typed`` (case-insensitive) or whose number starts with it, and the ``current`` one whatever it is (the
    dropdown shows its value only among its options)."""
    texts = data.sentences.text.to_numpy()
    return [{"label": f"{index}: {texts[index][:90]}{'…' if len(texts[index]) > 90 else ''}", "value": index}
            for index in offered_sequences(texts, typed, current, limit)]


def offered_sentences(data: RunData, state: ViewState, previous: ViewState | None):
    """The selector's options, sent when the run or the sentence changes: the first sentences and the chosen one
    (typing finds others, see :func:`register`), not all of a large run's thousands: rendering those took Dash
    1-2 s on every load."""
    changed = run_changed(state, previous) or previous.sentence != state.sentence
    return sentence_options(data, "", state.sentence) if changed else no_update


def choose_sentence(state: ViewState, sentence, _data: RunData, shape: RunShape) -> ViewState:
    """Another sentence chosen in the selector."""
    return select_sentence(state, sentence, shape) if isinstance(sentence, int) else state


def select_clicked_token(state: ViewState, event: dict | None, data: RunData, shape: RunShape) -> ViewState:
    """A click on a query (curve 0) or key (curve 1) token of the sentence (``customdata``: its place in it)
    selects it."""
    target = clicked(event)
    if not target or target[0] >= 2:
        return state
    side, local = target
    rows = data.sentence_rows(state.sentence)
    if 0 <= local < len(rows):
        return select_point(state, int(rows[local]) + side * shape.n_tokens, state.sentence, shape)
    return state


def sentence_weights(data: RunData, layer: int, head: int, sentence: int, options: list[str],
                     weighting: str = "attention") -> tuple[np.ndarray, np.ndarray]:
    """``([query, key] adjusted weights, bool [token] hidden)`` of one sentence in one head; with ``weighting``
    ``"value"``, value-weighted (:func:`qkviz.analysis.moved_norms`)."""
    rows = data.sentence_rows(sentence)
    tokens = data.tokens.iloc[rows]
    hidden = hidden_tokens(tokens.position.to_numpy(), tokens.is_special.to_numpy(),
                           "first" in options, "special" in options)
    norms = moved_norms(data.run, layer, head)[rows] if weighting == "value" else None
    return adjusted_attention(data.run.attention(layer, head, sentence), hidden, norms), hidden


def strongest_pairs(weights: np.ndarray, min_weight: float = MIN_WEIGHT, max_lines: int = MAX_LINES
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(query, key)`` int arrays of the pairs drawn: weight >= ``min_weight``, the strongest ``max_lines``."""
    query, key = np.nonzero(weights >= min_weight)
    strongest = np.argsort(-weights[query, key], kind="stable")[:max_lines]
    return query[strongest], key[strongest]


def sentence_figure(texts: np.ndarray, weights: np.ndarray, hidden: np.ndarray, bold: int | None) -> go.Figure:
    """Two token columns and one line trace per drawn pair (``meta = [query, key]``, opacity = weight).

    ``texts`` ``[token]`` escaped labels; ``weights`` ``[query, key]``; ``hidden`` bool ``[token]``;
    ``bold`` the local index of the clicked token, if any."""
    n = len(texts)
    y = -np.arange(n, dtype=np.float32)
    shown = np.flatnonzero(~hidden)
    weight = ["bold" if index == bold else "normal" for index in shown]
    traces = [go.Scatter(x=np.full(len(shown), side, dtype=np.float32), y=y[shown], text=texts[shown],
                         customdata=shown.astype(np.int32), mode="markers+text", name=name,
                         textposition="middle left" if side == 0 else "middle right",
                         textfont=dict(size=13, weight=weight, color=colour), hovertemplate="%{text}<extra></extra>",
                         marker=dict(size=7, color=colour), cliponaxis=False)
              for side, name, colour in ((0, "queries", QUERY_COLOUR), (1, "keys", KEY_COLOUR))]
    for query, key in zip(*strongest_pairs(weights)):
        traces.append(go.Scatter(x=[0.02, 0.98], y=[y[query], y[key]], mode="lines", meta=[int(query), int(key)],
                                 opacity=float(min(1.0, weights[query, key])), hoverinfo="skip", showlegend=False,
                                 line=dict(color=LINE_COLOUR, width=2)))
    figure = go.Figure(traces)
    figure.update_layout(height=max(200, ROW_PX * n + 60), width=620, margin=dict(l=160, r=160, t=30, b=10),
                         showlegend=False, plot_bgcolor="white", hovermode="closest",
                         xaxis=dict(visible=False, range=[-0.05, 1.05], fixedrange=True),
                         yaxis=dict(visible=False, range=[-n + 0.5, 0.8], fixedrange=True),
                         title=dict(text="queries → keys", font=dict(size=13), x=0.5))
    return figure


def aggregate_figure(average: np.ndarray, layer: int, head: int, weighted: str = "attention") -> go.Figure:
    """Heatmap of ``average`` ``[query position, key position]`` (NaN cells left blank)."""
    visible = np.flatnonzero(~np.all(np.isnan(average), axis=1))
    size = int(visible.max()) + 1 if len(visible) else 1
    figure = go.Figure(go.Heatmap(z=average[:size, :size], colorscale=WEIGHT_SCALE, zmin=0,
                                  colorbar=dict(title=dict(text="mean weight", side="right")),
                                  hovertemplate="query %{y}, key %{x}: %{z:.3f}<extra></extra>"))
    figure.update_layout(height=560, width=620, margin=dict(l=50, r=10, t=50, b=50),
                         title=dict(text=f"Layer {layer} head {head}: mean {weighted} by position over the corpus "
                                         f"(positions < {AGGREGATE_POSITIONS})", font=dict(size=13)),
                         xaxis=dict(title="key position"), yaxis=dict(title="query position", autorange="reversed"))
    return figure


def render_sentence(data: RunData, state: ViewState, options: list[str]) -> tuple[go.Figure, str]:
    """The sentence figure and the line above it for ``state``."""
    rows = data.sentence_rows(state.sentence)
    weights, hidden = sentence_weights(data, state.layer, state.head, state.sentence, options, state.weighting)
    bold = None
    if state.point is not None and data.sentence_of(state.point % data.run.n_tokens) == state.sentence:
        bold = int(state.point % data.run.n_tokens - rows[0])
    figure = sentence_figure(plotly_texts(data.tokens.token.to_numpy()[rows]), weights, hidden, bold)
    n_pairs = len(strongest_pairs(weights)[0])
    weighted = "" if state.weighting == "attention" else f" ({weighting_labels(data)['value']}, each query's share)"
    message = (f"Sentence {state.sentence} ({len(rows)} tokens), layer {state.layer} head {state.head}: "
               f"{n_pairs} lines of weight ≥ {MIN_WEIGHT}{weighted} (at most {MAX_LINES}). Hover a token to see only "
               "its lines; click a query, then a key, to see why they meet.")
    return figure, message


def register(app: dash.Dash, context: AppContext) -> None:
    """Draw the sentence and the corpus average when the view opens or its state or options change; offer the
    sentences typed in the selector; show only the hovered token's lines (in the browser)."""
    runs = context.runs

    @app.callback(Output(ids.SENTENCE_GRAPH, "figure"), Output(ids.AGGREGATE_GRAPH, "figure"),
                  Output(ids.SENTENCE_MESSAGE, "children"),
                  Input(VIEW.state_store, "data"), Input(ids.SENTENCE_OPTIONS, "value"), prevent_initial_call=True)
    def draw_sentence(current, options):
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        data, options = runs[state.run], string_list(options)
        if data.patches is not None:     # an image run: the image with a query's attention laid over it
            return image_attention.render_image(
                data, state, options,
                lambda layer, head: sentence_weights(data, layer, head, state.sentence, options, state.weighting)[0])
        figure, message = render_sentence(data, state, options)
        value = state.weighting == "value"
        average = data.aggregate(state.layer, state.head, "first" in options, "special" in options, value)
        return figure, aggregate_figure(average, state.layer, state.head,
                                        "value-weighted attention" if value else "attention"), message

    @app.callback(Output(ids.SENTENCE_SELECT, "options", allow_duplicate=True),
                  Input(ids.SENTENCE_SELECT, "search_value"), State(ids.STATE, "data"), prevent_initial_call=True)
    def offer_sentences(typed, current):
        """The sentences matching what is typed in the selector (the state callback sets its first options)."""
        state = checked_state(current, runs)
        typed = typed[:MAX_SEARCH] if isinstance(typed, str) else ""
        return sentence_options(runs[state.run], typed, state.sentence)

    relay_graph_event(app, "showHoveredLines", ids.SENTENCE_GRAPH, "hoverData", ids.SENTENCE_HOVER_SINK)
    why_panel.register(app, runs, context.explanations, VIEW_NAME)


VIEW = register_view(View(
    name=VIEW_NAME, label="Sentence", order=30, layout=layout, register=register,
    point_events={ids.SENTENCE_CLICK: (ids.SENTENCE_GRAPH, "clickData")},
    actions={(ids.SENTENCE_CLICK, "data"): select_clicked_token, (ids.SENTENCE_SELECT, "value"): choose_sentence},
    controls={ids.SENTENCE_SELECT: "sentence", ids.SENTENCE_WEIGHTING: "weighting"},
    repeats={ids.SENTENCE_LAYER: "layer", ids.SENTENCE_HEAD: "head"},
    options={ids.SENTENCE_LAYER: layer_options, ids.SENTENCE_HEAD: head_options, ids.SENTENCE_SELECT: offered_sentences,
             ids.SENTENCE_WEIGHTING: weighting_options},
    url_fields=("sentence",)))
