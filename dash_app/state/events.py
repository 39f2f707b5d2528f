"""Browser events as the app reads them: relayed clientside into stores, parsed here.

A click or hover becomes a small payload in the browser, by a named function of ``assets/clientside.js``
(namespace :data:`NAMESPACE`), written to a ``dcc.Store`` that the state callback reads:

* a graph's point -> ``{curve, customdata, timestamp}`` (``pointEvent``; points are identified by
  ``customdata``, never by coordinates), a heatmap row -> the same with the row index (``heatmapRowEvent``);
* a pattern-matching button -> the fields of its id and a ``timestamp`` (``exemplarClick``,
  ``relatedHeadClick``, ``partnerClick``).

The ``*_target`` functions read a payload back, None for anything that is not one. The transitions at the end
are the state changes the views' events make (their ``actions``, see :mod:`dash_app.state.view_registry`).
"""

from __future__ import annotations

from dataclasses import replace

import dash
from dash import ClientsideFunction, Input, Output, State

from dash_app.data.run_data import RunData, RunShape
from dash_app.state.view_state import ViewState, open_head, select_point

#: the ``window.dash_clientside`` namespace of ``assets/clientside.js``
NAMESPACE = "qkviz"


def relay_graph_event(app: dash.Dash, function: str, graph: str, event: str, store: str) -> None:
    """``store.data = function(graph.<event>, graph id)`` in the browser (``event``: clickData, hoverData); not
    when the graph enters the page (it has no event yet)."""
    app.clientside_callback(ClientsideFunction(NAMESPACE, function), Output(store, "data"), Input(graph, event),
                            State(graph, "id"), prevent_initial_call=True)


def relay_point_events(app: dash.Dash, events: dict[str, tuple[str, str]]) -> None:
    """``pointEvent`` for every ``{store: (graph, event)}``."""
    for store, (graph, event) in events.items():
        relay_graph_event(app, "pointEvent", graph, event, store)


def relay_button_clicks(app: dash.Dash, function: str, buttons: dict, store: str) -> None:
    """``store.data = function()`` when a button matching the pattern-matching id ``buttons`` is clicked."""
    app.clientside_callback(ClientsideFunction(NAMESPACE, function), Output(store, "data"),
                            Input(buttons, "n_clicks"), prevent_initial_call=True)


def event_fields(event: dict | None, fields: tuple[str, ...]) -> tuple[int, ...] | None:
    """The integer ``fields`` of a payload, in order, or None when one is missing or not a number."""
    try:
        return tuple(int(event[field]) for field in fields)
    except (TypeError, KeyError, ValueError):
        return None


def clicked(event: dict | None) -> tuple[int, int] | None:
    """``(curve number, customdata)`` of a point event (``{curve, customdata, timestamp}``), or None."""
    return event_fields(event, ("curve", "customdata"))


def exemplar_target(event: dict | None) -> tuple[int, int, int, int] | None:
    """``(layer, head, sentence, point)`` of an exemplar click (``{layer, head, sentence, point, timestamp}``),
    or None."""
    return event_fields(event, ("layer", "head", "sentence", "point"))


def related_target(event: dict | None) -> tuple[int, int] | None:
    """``(layer, head)`` of a related-head click (``{layer, head, timestamp}``), or None."""
    return event_fields(event, ("layer", "head"))


def partner_target(event: dict | None) -> int | None:
    """The joint-layout point of a partner button click (``{point, timestamp}``), or None."""
    point = event_fields(event, ("point",))
    return None if point is None else point[0]


# -- the transitions events make on the view state ------------------------------------------------
# Each is ``transition(state, value, data, shape)``: the state, the new value of the component that changed, the
# run shown and its shape (see ``Transition`` in :mod:`dash_app.state.view_registry`).


def open_clicked_head(state: ViewState, event: dict | None, _data: RunData, shape: RunShape) -> ViewState:
    """A click on a head (a point or row whose ``customdata`` is the flat head ``layer * n_heads + head``) opens it
    in the single view."""
    target = clicked(event)
    return open_head(state, target[1], shape) if target else state


def select_joint_point(state: ViewState, point: int | None, data: RunData, shape: RunShape) -> ViewState:
    """Point ``point`` of the head's joint layout (queries, then keys) and its sentence selected, when in range."""
    if point is None or not 0 <= point < 2 * shape.n_tokens:
        return state
    return select_point(state, point, data.sentence_of(point % shape.n_tokens), shape)


def select_clicked_point(state: ViewState, event: dict | None, data: RunData, shape: RunShape) -> ViewState:
    """A click on a query or key (``customdata``: its point in the joint layout) selects it."""
    target = clicked(event)
    return select_joint_point(state, target[1], data, shape) if target else state


def show_view(view: str):
    """The action of a button that shows ``view``, whatever its click count."""
    return lambda state, _clicks, _data, _shape: replace(state, view=view)


def step(transition, delta: int):
    """The action of a button that makes ``transition(state, delta, shape)``, whatever its click count."""
    return lambda state, _clicks, _data, shape: transition(state, delta, shape)
