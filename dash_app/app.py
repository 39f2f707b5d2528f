"""The app shell: ``create_app(run_paths)`` -> a ``dash.Dash`` with the five views and search.

One layout holds the top bar and the five views (:mod:`dash_app.views`); which one shows, and
everything else a view is drawn from, is the :class:`~dash_app.state.ViewState` in a ``dcc.Store``,
mirrored in the URL. One callback (:func:`next_state`) turns every user action -- a control, a click,
the URL -- into the next state; each view redraws from the state in its own callbacks, registered by
its ``register``, which call plain figure functions. Styles and clientside callbacks are files in
``assets/``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import dash
from dash import Input, Output, State, dcc, html, no_update

from dash_app import export, ids, progress
from dash_app.attention_changes import AttentionChanges
from dash_app.guard import allowed_hosts, guard
from dash_app.events import clicked, exemplar_target, partner_target, related_target
from dash_app.run_data import METHOD_LABELS, RunData, unique_names
from dash_app.token_search import TokenSearch
from qkviz.search import ImageIds
from dash_app.state import (ViewState, checked_state, open_exemplar, open_head, select_point, select_run, select_sentence,
                            step_head, step_layer, validate)
from dash_app.url_state import parse_url, to_url
from dash_app.views import compare, heads, matrix, positions, sentence, single
from qkviz import QkvizError, open_run
from qkviz.report import COLOURS
from qkviz.store import DIMENSIONS

logger = logging.getLogger(__name__)

TAB_STYLE = {"padding": "8px 4px"}
#: the stores the shell holds: each view's last drawn key, and the events the state callback reads
STORES = (ids.MATRIX_RENDERED, ids.SINGLE_RENDERED, ids.POSITIONS_RENDERED, ids.EXEMPLAR_CLICK, ids.PARTNER_CLICK,
          *matrix.POINT_EVENTS, *single.POINT_EVENTS, *sentence.POINT_EVENTS, *heads.POINT_EVENTS,
          ids.POSITIONS_CLICK, ids.RELATED_CLICK, ids.HEADS_RENDERED, ids.EXPORT_SINK, *ids.VIEW_STATES.values())
#: where the app's CSS and clientside JavaScript lie (Dash serves and links every file in it)
ASSETS = Path(__file__).parent / "assets"


def open_runs(run_paths: list[Path]) -> list[RunData]:
    """Open every run (a QkvizError names the first that cannot be read)."""
    if not run_paths:
        raise QkvizError("give at least one run: 'qkviz serve --run runs/minilm'")
    names = unique_names([Path(path) for path in run_paths])
    return [RunData(open_run(path), name) for path, name in zip(run_paths, names)]


def create_app(run_paths: list[Path]) -> dash.Dash:
    """The app over the given run directories; the runs are opened now, their vectors read on demand."""
    return build_app(open_runs(run_paths))


def build_app(runs: list[RunData], hosts: frozenset[str] = allowed_hosts()) -> dash.Dash:
    """The app over opened runs, answering only for ``hosts`` (see :mod:`dash_app.guard`)."""
    searches = [TokenSearch(data.token_index, lambda method, data=data: data.all_layouts(method).points,
                            ImageIds(data.sentences) if data.patches is not None else None)
                for data in runs]
    app = dash.Dash(__name__, title="qkviz", update_title=None, serve_locally=True, assets_folder=str(ASSETS))
    guard(app.server, hosts)
    changes = AttentionChanges(runs)      # every comparable pair's attention change, computed in the background
    app.layout = shell_layout(runs, changes)
    register_state_callback(app, runs)
    register_search_count(app, runs, searches)
    progress.register(app, runs)
    matrix.register(app, runs, searches)
    single.register(app, runs, searches)
    sentence.register(app, runs)
    positions.register(app, runs)
    heads.register(app, runs)
    compare.register(app, runs, changes)
    export.register(app)
    changes.start()
    return app


def view_tabs(changes: AttentionChanges) -> list[tuple[str, str]]:
    """``(value, label)`` of the views offered: the five, and Compare when two runs are comparable."""
    tabs = [("matrix", "Matrix"), ("single", "Single head"), ("sentence", "Sentence"), ("positions", "Positions"),
            ("heads", "Heads")]
    return tabs + [("compare", "Compare")] if changes.pairs else tabs


def shell_layout(runs: list[RunData], changes: AttentionChanges | None = None) -> html.Div:
    """The page: the top bar and every view; ``changes``: the runs' comparisons (found anew when not given)."""
    changes = AttentionChanges(runs) if changes is None else changes
    return html.Div([
        dcc.Location(id=ids.URL, refresh=False),
        dcc.Store(id=ids.STATE),
        *(dcc.Store(id=store) for store in STORES),
        html.Div(className="topbar", children=[
            html.Span("qkviz", className="brand"),
            dcc.Dropdown(id=ids.RUN_SELECT, options=[{"label": data.name, "value": index}
                                                     for index, data in enumerate(runs)],
                         value=0, clearable=False, style={"width": "180px"}),
            dcc.Tabs(id=ids.VIEW_TABS, value="matrix", children=[
                dcc.Tab(label=label, value=value, style=TAB_STYLE, selected_style=TAB_STYLE)
                for value, label in view_tabs(changes)],
                     style={"width": f"{108 * len(view_tabs(changes))}px", "height": "40px"}),
            dcc.Dropdown(id=ids.METHOD_SELECT, clearable=False, style={"width": "210px"}),
            dcc.RadioItems(id=ids.DIM_SELECT, options=[{"label": f"{dim}D", "value": dim} for dim in DIMENSIONS],
                           value=2, inline=True),
            dcc.Input(id=ids.SEARCH_INPUT, type="search", placeholder="search a token", debounce=0.3, value="",
                      maxLength=100, style={"width": "180px"}),
            dcc.Checklist(id=ids.SEARCH_SUBSTRING, options=[{"label": "substring", "value": "substring"}],
                          value=[], inline=True),
            html.Span(id=ids.SEARCH_COUNT),
        ]),
        *progress.layout(runs),
        html.Div(id=ids.NOTICE),
        html.Div(id=ids.RUN_INFO, className="info"),
        matrix.layout(),
        single.layout(),
        sentence.layout(),
        positions.layout(),
        heads.layout(),
        compare.layout(runs, changes),
    ])


# -- state ------------------------------------------------------------------------------------
#: controls whose value is a state field as is
FIELD_CONTROLS = {ids.VIEW_TABS: "view", ids.METHOD_SELECT: "method", ids.DIM_SELECT: "dim",
                  ids.COLOUR_SELECT: "colour", ids.SEARCH_INPUT: "search", ids.MATRIX_SORT: "sort",
                  ids.LAYER_SELECT: "layer", ids.HEAD_SELECT: "head",
                  ids.SENTENCE_LAYER: "layer", ids.SENTENCE_HEAD: "head", ids.MATRIX_COLOUR: "colour"}
#: controls repeating a field in the view named (read instead of the field's other control while it shows)
VIEW_CONTROLS = {ids.SENTENCE_LAYER: "sentence", ids.SENTENCE_HEAD: "sentence", ids.MATRIX_COLOUR: "matrix"}
STEPS = {ids.PREV_HEAD: (step_head, -1), ids.NEXT_HEAD: (step_head, 1),
         ids.LAYER_UP: (step_layer, -1), ids.LAYER_DOWN: (step_layer, 1)}


#: view (``ViewState.view``) -> the id of its container, shown only for that view
VIEW_IDS = {"matrix": ids.MATRIX_VIEW, "single": ids.SINGLE_VIEW, "sentence": ids.SENTENCE_VIEW,
            "positions": ids.POSITIONS_VIEW, "heads": ids.HEADS_VIEW, "compare": ids.COMPARE_VIEW}


def with_controls(state: ViewState, controls: dict, shape) -> ViewState:
    """``state`` updated from what the controls show now (``{control id: value}``).

    Two actions in quick succession can both start from the stored state, and Dash keeps only the
    later answer; the controls still show the first action's change, so reading them keeps it."""
    changes = {name: controls[control] for control, name in FIELD_CONTROLS.items()
               if controls.get(control) is not None and reads_control(control, state.view)}
    if ids.SEARCH_SUBSTRING in controls:
        changes["substring"] = isinstance(controls[ids.SEARCH_SUBSTRING], list) and "substring" in controls[ids.SEARCH_SUBSTRING]
    merged = validate(replace(state, **changes), shape, state)
    sentence = controls.get(ids.SENTENCE_SELECT)
    return select_sentence(merged, sentence, shape) if isinstance(sentence, int) else merged


def reads_control(control: str, view: str) -> bool:
    """Whether ``control`` gives its field's value while ``view`` shows: a view's own repeat of a field
    (:data:`VIEW_CONTROLS`) while it shows, the field's other control otherwise."""
    if control in VIEW_CONTROLS:
        return VIEW_CONTROLS[control] == view
    name = FIELD_CONTROLS[control]
    return not any(FIELD_CONTROLS[other] == name and shown == view for other, shown in VIEW_CONTROLS.items())


def next_state(trigger: str | None, value, current: dict | None, url_search: str | None,
               runs: list[RunData], controls: dict | None = None) -> tuple[ViewState, list[str]]:
    """The state after one user action, and the notices to show (only a URL makes notices).

    ``trigger`` is the id of the component that changed (None on first load) and ``value`` its
    new property value (for graphs, the point event); ``controls`` the values all controls show."""
    shapes = [data.shape for data in runs]
    if trigger in (None, ids.URL) or current is None:
        return parse_url(url_search, shapes)
    state = checked_state(current, runs)
    data, shape = runs[state.run], shapes[state.run]
    if trigger != ids.RUN_SELECT:
        state = with_controls(state, controls or {}, shape)
    if trigger == ids.RUN_SELECT:
        if isinstance(value, int) and 0 <= value < len(runs) and value != state.run:
            state = select_run(state, value, shapes[value])
    elif trigger in FIELD_CONTROLS and value is not None:
        state = replace(state, **{FIELD_CONTROLS[trigger]: value})
    elif trigger == ids.SEARCH_SUBSTRING:
        state = replace(state, substring=isinstance(value, list) and "substring" in value)
    elif trigger in STEPS:
        step, delta = STEPS[trigger]
        state = step(state, delta, shape)
    elif trigger in (ids.MATRIX_CLICK, ids.POSITIONS_CLICK, ids.HEADS_CLICK) and clicked(value):
        state = open_head(state, clicked(value)[1], shape)
    elif trigger == ids.RELATED_CLICK and related_target(value):
        layer, head = related_target(value)
        if 0 <= layer < shape.n_layers and 0 <= head < shape.n_heads:
            state = open_head(state, layer * shape.n_heads + head, shape)
    elif trigger == ids.EXEMPLAR_CLICK and exemplar_target(value):
        layer, head, sentence, point = exemplar_target(value)
        if 0 <= sentence < shape.n_sentences and point in data.sentence_rows(sentence):
            state = open_exemplar(state, layer, head, sentence, point, shape)
    elif trigger == ids.SINGLE_CLICK and clicked(value):
        point = clicked(value)[1]
        if 0 <= point < 2 * shape.n_tokens:
            state = select_point(state, point, data.sentence_of(point % shape.n_tokens), shape)
    elif trigger == ids.PARTNER_CLICK and partner_target(value) is not None:
        point = partner_target(value)
        if 0 <= point < 2 * shape.n_tokens:
            state = select_point(state, point, data.sentence_of(point % shape.n_tokens), shape)
    elif trigger == ids.SENTENCE_CLICK and clicked(value) and clicked(value)[0] < 2:
        side, local = clicked(value)
        rows = data.sentence_rows(state.sentence)
        if 0 <= local < len(rows):
            state = select_point(state, int(rows[local]) + side * shape.n_tokens, state.sentence, shape)
    elif trigger == ids.SENTENCE_SELECT and isinstance(value, int):
        state = select_sentence(state, value, shape)
    elif trigger == ids.OPEN_SENTENCE:
        state = replace(state, view="sentence")
    return validate(state, shape, ViewState(run=state.run, method=shape.default_method)), []


def method_options(data: RunData) -> list[dict]:
    """``"t-SNE (72/72 heads, recall 4%)"`` per method offered (some head has its 2D layout, or it is being
    made): how many heads have it, and, when the correlation report covers it, the layout's mean partner
    recall@10 over heads (how faithfully it shows who attends to whom)."""
    available, total = data.available(), data.n_total_heads
    options = []
    for method in data.offered_methods():
        recall = data.mean_recall(f"{method}-2d")
        shown = "" if recall is None else f", recall {recall:.0%}"
        making = ", being made" if data.in_background(method) else ""
        options.append({"label": f"{METHOD_LABELS[method]} ({available[(method, 2)]}/{total} heads{making}{shown})",
                        "value": method})
    return options


def dim_options(data: RunData, method: str) -> list[dict]:
    """2D and 3D, each disabled when no head has ``method``'s layout in it."""
    offered = data.offered_layouts()
    return [{"label": f"{dim}D", "value": dim, "disabled": (method, dim) not in offered} for dim in DIMENSIONS]


def register_state_callback(app: dash.Dash, runs: list[RunData]) -> None:
    value_controls = [(ids.RUN_SELECT, "value"), *((control, "value") for control in FIELD_CONTROLS),
                      (ids.SEARCH_SUBSTRING, "value"), (ids.SENTENCE_SELECT, "value")]
    event_inputs = [(ids.MATRIX_CLICK, "data"), (ids.SINGLE_CLICK, "data"), (ids.SENTENCE_CLICK, "data"),
                    (ids.POSITIONS_CLICK, "data"), (ids.EXEMPLAR_CLICK, "data"), (ids.PARTNER_CLICK, "data"),
                    (ids.HEADS_CLICK, "data"), (ids.RELATED_CLICK, "data"),
                    *((button, "n_clicks") for button in STEPS),
                    (ids.OPEN_SENTENCE, "n_clicks")]

    @app.callback(
        Output(ids.STATE, "data"), Output(ids.URL, "search"), Output(ids.NOTICE, "children"),
        *(Output(control, prop) for control, prop in value_controls),
        Output(ids.LAYER_SELECT, "options"), Output(ids.HEAD_SELECT, "options"),
        Output(ids.SENTENCE_LAYER, "options"), Output(ids.SENTENCE_HEAD, "options"),
        Output(ids.SENTENCE_SELECT, "options"), Output(ids.METHOD_SELECT, "options"), Output(ids.DIM_SELECT, "options"),
        Output(ids.RUN_INFO, "children"),
        Output(ids.MATRIX_SORT, "options"),
        Output(ids.COLOUR_SELECT, "options"), Output(ids.MATRIX_COLOUR, "options"),
        *(Output(view, "style") for view in VIEW_IDS.values()),
        *(Output(store, "data") for store in ids.VIEW_STATES.values()),
        Input(ids.URL, "search"),
        *(Input(control, prop) for control, prop in value_controls),
        *(Input(control, prop) for control, prop in event_inputs),
        State(ids.STATE, "data"),
    )
    def update_state(url_search, *values):
        current = values[-1]
        inputs = dict(zip([control for control, _ in value_controls + event_inputs], values[:-1]))
        trigger = dash.ctx.triggered_id
        controls = {control: inputs[control] for control, _ in value_controls}
        state, notices = next_state(trigger, inputs.get(trigger), current, url_search, runs, controls)
        previous = checked_state(current, runs) if current else None
        data = runs[state.run]
        controls = {ids.RUN_SELECT: state.run, **{control: getattr(state, name)
                                                  for control, name in FIELD_CONTROLS.items()},
                    ids.SEARCH_SUBSTRING: ["substring"] if state.substring else [],
                    ids.SENTENCE_SELECT: state.sentence}
        # a control showing what the state holds is left alone (rewriting a text box being typed in loses keys)
        control_outputs = [no_update if inputs[control] == controls[control] else controls[control]
                           for control, _ in value_controls]
        run_changed = previous is None or previous.run != state.run
        layers = [{"label": str(i), "value": i} for i in range(data.run.n_layers)]
        head_choices = [{"label": str(i), "value": i} for i in range(data.run.n_heads)]
        # the sentence selector offers the first sentences and the chosen one (typing finds others, see
        # sentence.register), not all of a large run's thousands: rendering those took Dash 1-2 s on every load
        sentence_changed = run_changed or previous.sentence != state.sentence
        options = [layers, head_choices, layers, head_choices,
                   sentence.sentence_options(data, "", state.sentence) if sentence_changed else no_update,
                   method_options(data), dim_options(data, state.method), run_summary(data)]
        options = options if run_changed else [no_update] * 4 + options[4:7] + [no_update]
        # the sort control offers the atlas's columns, which may appear while the app runs: sent when the run
        # changes or the matrix view opens, not on every action
        opened_matrix = state.view == "matrix" and (previous is None or previous.view != "matrix")
        options.append(matrix.sort_control_options(data) if run_changed or opened_matrix else no_update)
        colours = [{"label": COLOURS[name], "value": name} for name in data.colours] if run_changed else no_update
        options += [colours, colours]
        styles = [{"display": "block" if state.view == view else "none"} for view in VIEW_IDS]
        notice = html.Div([html.Div(text) for text in notices], className="notice") if notices else None
        shown = [state.as_dict() if state.view == view else no_update for view in ids.VIEW_STATES]
        return (state.as_dict(), to_url(state, [d.shape for d in runs]), notice, *control_outputs, *options, *styles,
                *shown)


def run_summary(data: RunData) -> str:
    run = data.run
    return (f"{data.name}: {run.model_id} ({run.family}, {'causal' if run.is_causal else 'bidirectional'}), "
            f"{run.n_layers} layers × {run.n_heads} heads, {run.n_tokens:,} tokens, {run.n_sentences:,} sentences")


def register_search_count(app: dash.Dash, runs: list[RunData], searches: list[TokenSearch]) -> None:
    """The top bar's count of the tokens the search matches."""

    @app.callback(Output(ids.SEARCH_COUNT, "children"), Input(ids.STATE, "data"))
    def show_search_count(current):
        state = checked_state(current, runs)
        return searches[state.run].count_text(state.search, state.substring)
