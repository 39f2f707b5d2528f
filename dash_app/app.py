"""The app shell: ``create_app(run_paths)`` -> a ``dash.Dash`` with the views and search.

One layout holds the top bar and the views (:mod:`dash_app.views`); which one shows, and everything else a
view is drawn from, is the :class:`~dash_app.state.view_state.ViewState` in a ``dcc.Store``, mirrored in the URL. One
callback (:func:`next_state`) turns every user action -- a control, a click, the URL -- into the next state;
each view redraws from the state in its own callbacks, registered by its ``register``, which call plain figure
functions. Nothing here names a view: the tabs, the views' containers and stores, the relays of their clicks,
the state callback's inputs and outputs and what each input does are derived from the views' declarations
(:mod:`dash_app.state.view_registry`). Styles and clientside callbacks are files in ``assets/``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import dash
import flask
from dash import Input, Output, State, dcc, html, no_update

import dash_app.views  # noqa: F401  (each view registers itself)
from dash_app import export, ids, progress
from dash_app.deferred_graphs import FIRST_VIEW, defer_graphs, mounted_views, slot_children
from dash_app.data.attention_changes import AttentionChanges
from dash_app.state.events import relay_point_events
from dash_app.explain_worker import ExplainWorker, ModelLimits, new_session
from dash_app.guard import allowed_hosts, guard
from dash_app.plotly_bundle import page_scripts
from dash_app.progress import method_options
from dash_app.data.run_data import RunData, unique_names
from dash_app.state.view_state import ViewState, checked_state, select_run, validate
from dash_app.data.token_search import TokenSearch
from dash_app.url_state import parse_url, to_url
from dash_app.state.view_registry import AppContext, registered_views
from dash_app.wsgi_server import PrefixedPaths
from qkviz import QkvizError, open_run
from qkviz.search import ImageIds
from qkviz.store import DIMENSIONS

logger = logging.getLogger(__name__)

TAB_STYLE = {"padding": "8px 4px"}
#: the views, in tab order (each module of dash_app.views that is one registered itself)
VIEWS = registered_views()
#: the stores the shell holds: the views' (their last drawn key, the events the state callback reads, the state and
#: the layout stamp written only while the view shows) and the export buttons' sink
STORES = (*(store for view in VIEWS for store in (*view.stores, *view.point_events, view.state_store, view.layout_stamp)),
          ids.EXPORT_SINK)
#: where the app's CSS and clientside JavaScript lie (Dash serves and links every file in it)
ASSETS = Path(__file__).parent / "assets"


def open_runs(run_paths: list[Path], read_only: bool = False) -> list[RunData]:
    """Open every run (a QkvizError names the first that cannot be read); ``read_only``: nothing is written into
    them, not even checksums a manifest lacks (:func:`qkviz.open_run`)."""
    if not run_paths:
        raise QkvizError("give at least one run: 'qkviz serve --run runs/minilm'")
    names = unique_names([Path(path) for path in run_paths])
    return [RunData(open_run(path, read_only=read_only), name) for path, name in zip(run_paths, names)]


def create_app(run_paths: list[Path]) -> dash.Dash:
    """The app over the given run directories; the runs are opened now, their vectors read on demand."""
    return build_app(open_runs(run_paths))


def build_app(runs: list[RunData], hosts: frozenset[str] = allowed_hosts(), root_path: str = "/",
              limits: ModelLimits = ModelLimits()) -> dash.Dash:
    """The app over opened runs, answering only for ``hosts`` (see :mod:`dash_app.guard`), its page asking for
    everything under ``root_path`` (``/user/x/proxy/8050/`` behind a proxy; see :mod:`dash_app.wsgi_server`), its
    model work (the why panel, the ablate action) within ``limits`` (``qkviz serve --no-model``,
    ``--max-explain-tokens``)."""
    searches = [TokenSearch(data.token_index, lambda method, data=data: data.all_layouts(method).points,
                            ImageIds(data.sentences) if data.patches is not None else None)
                for data in runs]
    app = dash_app(root_path)
    guard(app.server, hosts, lambda: app.callback_map)
    # every comparable pair's attention change, computed in the background
    context = AppContext(runs, searches, AttentionChanges(runs), ExplainWorker(limits))
    page, deferred = shell_layout(context)
    opened = opened_pages(page, context)
    shapes = [data.shape for data in runs]
    app.layout = lambda: with_session(opened.get(requested_view(shapes), page))
    # every id a callback names, for Dash's checks in debug mode: the page and the graphs not yet in it
    app.validation_layout = html.Div([with_session(page),
                                      *(graph for slots in deferred.values() for graph in slots.values())])
    register_state_callback(app, runs, deferred)
    register_search_count(app, runs, searches)
    progress.register(app, runs, [view.name for view in VIEWS])
    for view in VIEWS:
        view.register(app, context)
        relay_point_events(app, view.point_events)
    export.register(app)
    context.changes.start()
    return app


def dash_app(root_path: str) -> dash.Dash:
    """The ``dash.Dash`` with every setting given here, so that Dash's own environment variables
    (``DASH_URL_BASE_PATHNAME``, ``DASH_MCP_ENABLED``, ...) change nothing: Flask as the only backend, routes at
    the root and the page's requests under ``root_path`` (:class:`PrefixedPaths` serves both), no MCP endpoint,
    no websocket callbacks, no health endpoint, and a Flask without its static route; its page loads the app's own
    plotly.js build where set-up made one (:mod:`dash_app.plotly_bundle`). A prefix set in the environment is refused
    with one line."""
    server = flask.Flask(__name__, static_folder=None)
    try:
        app = dash.Dash(__name__, server=server, title="qkviz", update_title=None, serve_locally=True,
                        assets_folder=str(ASSETS), external_scripts=page_scripts(server, root_path),
                        backend="flask", routes_pathname_prefix="/", requests_pathname_prefix=root_path,
                        enable_mcp=False, websocket_callbacks=False, health_endpoint=None)
    except dash.exceptions.InvalidConfig as error:
        raise QkvizError(f"Dash's environment sets a path prefix ({str(error).strip().splitlines()[0]}); unset "
                         "DASH_URL_BASE_PATHNAME / DASH_ROUTES_PATHNAME_PREFIX and give --root-path instead") from None
    app.server.wsgi_app = PrefixedPaths(app.server.wsgi_app, root_path)
    return app


def with_session(page: html.Div) -> html.Div:
    """The page as one load of it gets it: with a session id of its own (:data:`dash_app.ids.PAGE_SESSION`), by
    which the server queues its model work fairly between pages (:mod:`dash_app.explain_worker`)."""
    return html.Div([dcc.Store(id=ids.PAGE_SESSION, data=new_session()), *page.children])


#: the projection menu's width: its longest label, "attention t-SNE (1023/1024 heads, being made, recall 30%)"
#: (:func:`dash_app.progress.method_options`), is about 480 px at the page's 16 px, the control's arrow and padding 47
#: more; the rest is room for wider fonts. The top bar wraps it to its second row, beside the search box, at 1400 px
#: across.
METHOD_SELECT_PX = 600


def view_tabs(context: AppContext) -> list[tuple[str, str]]:
    """``(value, label)`` of the views offered (a view may be offered only for some runs: Compare when two
    are comparable)."""
    return [(view.name, view.label) for view in VIEWS if view.offered(context)]


def shell_layout(context: AppContext) -> tuple[html.Div, dict[str, dict]]:
    """The page: the top bar and every view (each view's container is in the page, its tab offered or not), and
    the graphs of the views other than the first, held back until each first shows (``{view: {slot id: graph}}``,
    :mod:`dash_app.deferred_graphs`)."""
    runs, tabs = context.runs, view_tabs(context)
    containers = [view.layout(context) for view in VIEWS]
    deferred = {view.name: defer_graphs(container) for view, container in zip(VIEWS, containers)
                if view.name != FIRST_VIEW}
    return html.Div([
        dcc.Location(id=ids.URL, refresh=False),
        dcc.Store(id=ids.STATE),
        dcc.Store(id=ids.MOUNTED_VIEWS, data=[FIRST_VIEW]),
        *(dcc.Store(id=store) for store in STORES),
        html.Div(className="topbar", children=[
            html.Span("qkviz", className="brand"),
            dcc.Dropdown(id=ids.RUN_SELECT, options=[{"label": data.name, "value": index}
                                                     for index, data in enumerate(runs)],
                         value=0, clearable=False, style={"width": "180px"}),
            dcc.Tabs(id=ids.VIEW_TABS, value=ViewState().view, children=[
                dcc.Tab(label=label, value=value, style=TAB_STYLE, selected_style=TAB_STYLE) for value, label in tabs],
                     style={"width": f"{108 * len(tabs)}px", "height": "40px"}),
            dcc.Dropdown(id=ids.METHOD_SELECT, clearable=False, style={"width": f"{METHOD_SELECT_PX}px"}),
            dcc.RadioItems(id=ids.DIM_SELECT, options=[{"label": f"{dim}D", "value": dim} for dim in DIMENSIONS],
                           value=2, inline=True),
            # the search runs on Enter or when the box loses focus (debounce=True), not while typing: a timed
            # debounce held Enter back by its delay
            dcc.Input(id=ids.SEARCH_INPUT, type="search", placeholder="search a token", debounce=True, value="",
                      maxLength=100, style={"width": "180px"}),
            dcc.Checklist(id=ids.SEARCH_SUBSTRING, options=[{"label": "substring", "value": "substring"}],
                          value=[], inline=True),
            html.Span(id=ids.SEARCH_COUNT),
        ]),
        *progress.layout(runs),
        html.Div(id=ids.NOTICE),
        html.Div(id=ids.RUN_INFO, className="info"),
        *containers,
    ]), {view: slots for view, slots in deferred.items() if slots}


def opened_pages(page: html.Div, context: AppContext) -> dict[str | None, html.Div]:
    """``{view: page}``: the page for a visit that opens on a view with an :attr:`~View.opened_layout` (the
    matrix's first drawing), ``page`` with that view's container replaced; the first view's is also the page of a
    visit whose view is not known (None). Only the first view (:data:`FIRST_VIEW`) is laid out whole, its graphs in
    the page from the start, so only it may have one."""
    pages = {}
    for view in VIEWS:
        if view.opened_layout is not None:
            if view.name != FIRST_VIEW:
                raise ValueError(f"view {view.name!r} has an opened layout, but its graphs are held back")
            container = view.opened_layout(context)
            pages[view.name] = html.Div([container if getattr(child, "id", None) == view.container else child
                                         for child in page.children])
    if FIRST_VIEW in pages:
        pages[None] = pages[FIRST_VIEW]
    return pages


def requested_view(shapes) -> str | None:
    """The view the page asking for its layout opens on, read from its address: Dash asks for ``_dash-layout``
    from the page, whose address (with its query, ``?view=composition``) the browser sends as the ``Referer`` of a
    request to its own origin. None outside a request, or where the request names no page (a browser or proxy that
    leaves the header out): that page gets every first drawing, as a page without a query needs."""
    if not flask.has_request_context() or not flask.request.referrer:
        return None
    state, _notices = parse_url(urlsplit(flask.request.referrer).query, shapes)
    return state.view


# -- state ------------------------------------------------------------------------------------
#: controls whose value is a state field as is: the top bar's, and every view's (its repeats too)
FIELD_CONTROLS = {ids.VIEW_TABS: "view", ids.METHOD_SELECT: "method", ids.DIM_SELECT: "dim", ids.SEARCH_INPUT: "search",
                  **{control: name for view in VIEWS for control, name in (*view.controls.items(), *view.repeats.items())}}
#: controls repeating a field in the view named (read instead of the field's other control while it shows)
VIEW_CONTROLS = {control: view.name for view in VIEWS for control in view.repeats}
#: component -> (property, transition): the views' actions, the state callback's inputs besides the controls
ACTIONS = {component: (prop, transition) for view in VIEWS for (component, prop), transition in view.actions.items()}
#: control -> its options (see dash_app.state.control_options), sent by the state callback
CONTROL_OPTIONS = {control: options for view in VIEWS for control, options in view.options.items()}


def with_controls(state: ViewState, controls: dict, data: RunData, shape) -> ViewState:
    """``state`` updated from what the controls show now (``{control id: value}``).

    Two actions in quick succession can both start from the stored state, and Dash keeps only the
    later answer; the controls still show the first action's change, so reading them keeps it. A control with
    an action of its own (the sentence selector) makes its action rather than setting its field as is."""
    shown = {control: controls[control] for control in FIELD_CONTROLS
             if controls.get(control) is not None and reads_control(control, state.view)}
    changes = {FIELD_CONTROLS[control]: value for control, value in shown.items() if control not in ACTIONS}
    if ids.SEARCH_SUBSTRING in controls:
        changes["substring"] = isinstance(controls[ids.SEARCH_SUBSTRING], list) and "substring" in controls[ids.SEARCH_SUBSTRING]
    merged = validate(replace(state, **changes), shape, state)
    for control, value in shown.items():
        if control in ACTIONS:
            merged = ACTIONS[control][1](merged, value, data, shape)
    return merged


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
        state = with_controls(state, controls or {}, data, shape)
    if trigger == ids.RUN_SELECT:
        if isinstance(value, int) and 0 <= value < len(runs) and value != state.run:
            state = select_run(state, value, shapes[value])
    elif trigger in ACTIONS:
        state = ACTIONS[trigger][1](state, value, data, shape)
    elif trigger in FIELD_CONTROLS and value is not None:
        state = replace(state, **{FIELD_CONTROLS[trigger]: value})
    elif trigger == ids.SEARCH_SUBSTRING:
        state = replace(state, substring=isinstance(value, list) and "substring" in value)
    return validate(state, shape, ViewState(run=state.run, method=shape.default_method)), []


def dim_options(data: RunData, method: str) -> list[dict]:
    """2D and 3D, each disabled when no head has ``method``'s layout in it."""
    offered = data.offered_layouts()
    return [{"label": f"{dim}D", "value": dim, "disabled": (method, dim) not in offered} for dim in DIMENSIONS]


def register_state_callback(app: dash.Dash, runs: list[RunData], deferred: dict[str, dict]) -> None:
    """The state callback (:func:`next_state`), which also puts a view's held-back graphs (``deferred``, from
    :func:`shell_layout`) into the page when the state first shows it."""
    value_controls = [(ids.RUN_SELECT, "value"), *((control, "value") for control in FIELD_CONTROLS),
                      (ids.SEARCH_SUBSTRING, "value")]
    event_inputs = [(component, prop) for component, (prop, _) in ACTIONS.items() if component not in FIELD_CONTROLS]

    @app.callback(
        Output(ids.STATE, "data"), Output(ids.URL, "search"), Output(ids.NOTICE, "children"),
        *(Output(control, prop) for control, prop in value_controls),
        Output(ids.METHOD_SELECT, "options"), Output(ids.DIM_SELECT, "options"), Output(ids.RUN_INFO, "children"),
        *(Output(control, "options") for control in CONTROL_OPTIONS),
        *(Output(view.container, "style") for view in VIEWS),
        *(Output(view.state_store, "data") for view in VIEWS),
        Output(ids.MOUNTED_VIEWS, "data"),
        *(Output(slot, "children") for slots in deferred.values() for slot in slots),
        Input(ids.URL, "search"),
        *(Input(control, prop) for control, prop in value_controls),
        *(Input(control, prop) for control, prop in event_inputs),
        State(ids.STATE, "data"),
        State(ids.MOUNTED_VIEWS, "data"),
    )
    def update_state(url_search, *values):
        current, mounted = values[-2:]
        inputs = dict(zip([control for control, _ in value_controls + event_inputs], values[:-2]))
        trigger = dash.ctx.triggered_id
        controls = {control: inputs[control] for control, _ in value_controls}
        state, notices = next_state(trigger, inputs.get(trigger), current, url_search, runs, controls)
        previous = checked_state(current, runs) if current else None
        data = runs[state.run]
        controls = {ids.RUN_SELECT: state.run, **{control: getattr(state, name)
                                                  for control, name in FIELD_CONTROLS.items()},
                    ids.SEARCH_SUBSTRING: ["substring"] if state.substring else []}
        # a control showing what the state holds is left alone (rewriting a text box being typed in loses keys)
        control_outputs = [no_update if inputs[control] == controls[control] else controls[control]
                           for control, _ in value_controls]
        run_changed = previous is None or previous.run != state.run
        options = [method_options(data), dim_options(data, state.method), run_summary(data) if run_changed else no_update,
                   *(options(data, state, previous) for options in CONTROL_OPTIONS.values())]
        styles = [{"display": "block" if state.view == view.name else "none"} for view in VIEWS]
        notice = html.Div([html.Div(text) for text in notices], className="notice") if notices else None
        shown = [state.as_dict() if state.view == view.name else no_update for view in VIEWS]
        return (state.as_dict(), to_url(state, [d.shape for d in runs]), notice, *control_outputs, *options, *styles,
                *shown, mounted_views(state.view, mounted), *slot_children(deferred, state.view, mounted))


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
