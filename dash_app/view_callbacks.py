"""The views' callbacks: each view redraws from the :class:`~dash_app.state.ViewState` in its own
callback, which calls that view's plain figure functions; point and button events are relayed
clientside into stores that the state callback (:mod:`dash_app.app`) reads.
"""

from __future__ import annotations

import dash
import numpy as np
from dash import ALL, Input, Output, Patch, State, no_update
from dash.exceptions import PreventUpdate

from dash_app import (atlas_panel, ids, matrix_view, partners_panel, positions_view, related_panel, sentence_view,
                      single_view)
from dash_app.figures import clicked, message_figure, point_event_js
from dash_app.run_data import RunData
from dash_app.search import TokenSearch
from dash_app.state import ViewState
from qkviz import QkvizError

NO_MATCHES = np.zeros(0, dtype=np.int64)
#: store -> (graph, event property) it is filled from by :func:`~dash_app.figures.point_event_js`
POINT_EVENTS = {ids.MATRIX_CLICK: (ids.MATRIX_GRAPH, "clickData"), ids.SINGLE_CLICK: (ids.SINGLE_GRAPH, "clickData"),
                ids.SINGLE_HOVER_POINT: (ids.SINGLE_GRAPH, "hoverData"),
                ids.SENTENCE_CLICK: (ids.SENTENCE_GRAPH, "clickData"), ids.HEADS_CLICK: (ids.HEADS_GRAPH, "clickData")}


def search_count_text(searches: list[TokenSearch], state: ViewState) -> str:
    if not state.search.strip():
        return ""
    count = searches[state.run].find(state.search, state.substring).count
    return f"{count} result" if count == 1 else f"{count} results"


def register(app: dash.Dash, runs: list[RunData], searches: list[TokenSearch]) -> None:
    """Every view's drawing callbacks and the clientside relays of point and button events."""
    def matches_of(state: ViewState):
        if not state.search.strip():
            return None
        return searches[state.run].find(state.search, state.substring).tokens

    @app.callback(Output(ids.SEARCH_COUNT, "children"), Input(ids.STATE, "data"))
    def show_search_count(current):
        return search_count_text(searches, ViewState.from_dict(current))

    @app.callback(Output(ids.MATRIX_GRAPH, "figure"), Output(ids.MATRIX_MESSAGE, "children"),
                  Output(ids.MATRIX_RENDERED, "data"), Input(ids.STATE, "data"), State(ids.MATRIX_RENDERED, "data"))
    def draw_matrix(current, rendered):
        state = ViewState.from_dict(current)
        data = runs[state.run]
        key = [state.run, state.method, state.dim, state.search.strip().lower(), state.substring, state.sort,
               data.atlas_stamp() if state.sort in data.atlas_sorts() else
               data.related_stamp() if state.sort == "related" else None]
        if state.view != "matrix" or key == rendered:
            raise PreventUpdate
        matches = matches_of(state)
        clusters = (searches[state.run].clusters(state.search, state.substring, state.method)
                    if matches is not None else None)
        if rendered and rendered[:3] + rendered[5:] == key[:3] + key[5:] and state.sort != "clusters":
            # only the search changed: send the matches and badges, not every head's points again
            return matrix_view.search_patch(data, state, clusters, matches), no_update, key
        figure, message = matrix_view.render_matrix(data, state, clusters, matches)
        return figure, message, key

    @app.callback(Output(ids.SINGLE_GRAPH, "figure"), Output(ids.SINGLE_INFO, "children"),
                  Output(ids.SINGLE_MESSAGE, "children"), Output(ids.SINGLE_CORRELATION, "children"),
                  Output(ids.SINGLE_ATLAS, "children"), Output(ids.SINGLE_RENDERED, "data"),
                  Output(ids.SINGLE_RELATED, "children"),
                  Input(ids.STATE, "data"), Input(ids.SINGLE_OPTIONS, "value"), Input(ids.TOP_K, "value"),
                  Input(ids.THRESHOLD, "value"), Input(ids.PARTNER_K, "value"), Input(ids.PARTNER_OPTIONS, "value"),
                  State(ids.SINGLE_RENDERED, "data"))
    def draw_single(current, options, top_k, threshold, partner_k, partner_options, rendered):
        state = ViewState.from_dict(current)
        if state.view != "single":
            raise PreventUpdate
        data = runs[state.run]
        top_k = single_view.DEFAULT_TOP_K if top_k is None else int(top_k)
        threshold = single_view.DEFAULT_THRESHOLD if threshold is None else float(threshold)
        base_key = [state.run, state.layer, state.head, state.method, state.dim, state.colour,
                    state.search.strip().lower(), state.substring, sorted(options or [])]
        overlay_key = [state.point, top_k, threshold, partner_k, sorted(partner_options or [])]
        partners = partners_panel.partner_points(data, state, partner_k, partner_options)
        key = {"base": base_key, "overlay": overlay_key}
        if rendered == key:
            raise PreventUpdate
        if rendered and rendered.get("base") == base_key and rendered.get("ok"):
            return (overlay_patch(data, state, top_k, threshold, partners), no_update, no_update, no_update, no_update,
                    {**key, "ok": True}, no_update)
        matches = matches_of(state)
        correlations = single_view.correlation_panel(data, state.layer, state.head)
        atlas = atlas_panel.head_panel(data, state.layer, state.head)
        related = related_panel.render_related(data, state.layer, state.head)
        try:
            figure = single_view.render_single(data, state, options or [], NO_MATCHES if matches is None else matches,
                                               top_k, threshold, partners)
        except QkvizError as error:
            return (message_figure(), single_view.info_line(data), str(error), correlations, atlas,
                    {**key, "ok": False}, related)
        return figure, single_view.info_line(data), "", correlations, atlas, {**key, "ok": True}, related

    def overlay_patch(data: RunData, state: ViewState, top_k: int, threshold: float, partners: np.ndarray) -> Patch:
        coordinates = data.layout(state.layer, state.head, state.method, state.dim)
        patch = Patch()
        overlays = single_view.overlay_traces(data, coordinates, state.layer, state.head, state.point, top_k, threshold,
                                              partners)
        for slot, trace in zip(range(single_view.OVERLAY_SLOTS.start, single_view.OVERLAY_SLOTS.stop), overlays):
            patch["data"][slot] = trace
        return patch

    @app.callback(Output(ids.SINGLE_PARTNERS, "children"), Input(ids.STATE, "data"), Input(ids.PARTNER_K, "value"),
                  Input(ids.PARTNER_OPTIONS, "value"))
    def list_partners(current, partner_k, partner_options):
        state = ViewState.from_dict(current)
        if state.view != "single":
            raise PreventUpdate
        return partners_panel.render_partners(runs[state.run], state, partner_k, partner_options)

    @app.callback(Output(ids.SINGLE_HOVER, "children"), Input(ids.SINGLE_HOVER_POINT, "data"), State(ids.STATE, "data"))
    def show_hover(hover, current):
        target = clicked(hover)
        if target is None:
            raise PreventUpdate
        return single_view.hover_details(runs[ViewState.from_dict(current).run], ViewState.from_dict(current), target[1])

    @app.callback(Output(ids.SENTENCE_GRAPH, "figure"), Output(ids.AGGREGATE_GRAPH, "figure"),
                  Output(ids.SENTENCE_MESSAGE, "children"),
                  Input(ids.STATE, "data"), Input(ids.SENTENCE_OPTIONS, "value"))
    def draw_sentence(current, options):
        state = ViewState.from_dict(current)
        if state.view != "sentence":
            raise PreventUpdate
        data, options = runs[state.run], options or []
        figure, message = sentence_view.render_sentence(data, state, options)
        average = data.aggregate(state.layer, state.head, "first" in options, "special" in options,
                                 "value_norm" in options)
        return figure, sentence_view.aggregate_figure(average, state.layer, state.head), message

    @app.callback(Output(ids.POSITIONS_GRAPH, "figure"), Output(ids.POSITIONS_MESSAGE, "children"),
                  Output(ids.POSITIONS_RENDERED, "data"), Input(ids.STATE, "data"),
                  State(ids.POSITIONS_RENDERED, "data"))
    def draw_positions(current, rendered):
        state = ViewState.from_dict(current)
        if state.view != "positions":
            raise PreventUpdate
        data = runs[state.run]
        key = [state.run, data.atlas_stamp()]
        if key == rendered:
            raise PreventUpdate
        figure, message = positions_view.render_positions(data)
        return figure, message, key

    for store, (graph, event) in POINT_EVENTS.items():
        app.clientside_callback(point_event_js(graph), Output(store, "data"), Input(graph, event))
    app.clientside_callback(positions_view.ROW_EVENT_JS, Output(ids.POSITIONS_CLICK, "data"),
                            Input(ids.POSITIONS_GRAPH, "clickData"))
    exemplars = {"type": ids.EXEMPLAR, "layer": ALL, "head": ALL, "sentence": ALL, "point": ALL}
    app.clientside_callback(atlas_panel.EXEMPLAR_CLICK_JS, Output(ids.EXEMPLAR_CLICK, "data"),
                            Input(exemplars, "n_clicks"), prevent_initial_call=True)
    related_buttons = {"type": ids.RELATED_HEAD, "layer": ALL, "head": ALL, "by": ALL}
    app.clientside_callback(related_panel.RELATED_CLICK_JS, Output(ids.RELATED_CLICK, "data"),
                            Input(related_buttons, "n_clicks"), prevent_initial_call=True)
    partner_buttons = {"type": ids.PARTNER, "point": ALL}
    app.clientside_callback(partners_panel.PARTNER_CLICK_JS, Output(ids.PARTNER_CLICK, "data"),
                            Input(partner_buttons, "n_clicks"), prevent_initial_call=True)
    app.clientside_callback(sentence_view.HOVER_JS, Output(ids.SENTENCE_HOVER_SINK, "data"),
                            Input(ids.SENTENCE_GRAPH, "hoverData"))
