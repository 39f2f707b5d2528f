"""The single view's "Selection" panel: the points a lasso or box selection holds, as a table and a CSV.

Plotly's ``selectedData`` is relayed clientside (``selectionEvent`` in ``assets/selection_compare.js``) as
``{curves, points, timestamp}``: each selected point's trace number and its ``customdata`` (its index in the
head's joint layout: query ``t`` is ``t``, key ``t`` is ``n_tokens + t``), no coordinates. The server takes
only what :func:`selected_points` accepts from it: lists of whole numbers, at most the head's ``2 * n_tokens``
points, of the queries and keys traces (the overlays' points -- search matches, the clicked point's
sentence, partners -- repeat points of those and are ignored), each in its trace's range.

The table (:func:`selection_frame`) has a row per selected point: its token, its sentence with the token
marked, query or key, its vector's norm, position, sentence and point index. The page shows its first
:data:`SHOWN_ROWS` rows; the CSV download holds them all. The last selection is also kept on the run's
:class:`~dash_app.data.run_data.RunData` as ``selection`` (what ``Run.selection`` reads in a notebook).
"""

from __future__ import annotations

import dash
import numpy as np
import pandas as pd
from dash import ClientsideFunction, Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.state.events import NAMESPACE
from dash_app.data.run_data import RunData
from dash_app.state.view_state import checked_state

#: rows the page shows (the CSV holds every selected point)
SHOWN_ROWS = 100
#: the single view's traces whose points are the head's queries (0) and keys (1)
BASE_CURVES = (0, 1)
#: the token in its sentence: ``"The cat «sat» on the mat."``
MARK_OPEN, MARK_CLOSE = "«", "»"
COLUMNS = ("token", "in_sentence", "kind", "norm", "position", "sentence", "point", "layer", "head")
#: the figure's toolbar offers lasso and box selection (Plotly's select tools, named so that they stay)
SELECT_TOOLS = {"modeBarButtonsToAdd": ["lasso2d", "select2d"]}
EMPTY_MESSAGE = "Select points with the lasso or box tool of the figure's toolbar (2D)."


def controls() -> list:
    """The panel's heading, table and CSV button (placed in the single view's side panel)."""
    return [dcc.Store(id=ids.SINGLE_SELECTION), dcc.Store(id=ids.SELECTION_SHOWN), html.H4("Selection"),
            html.Div(id=ids.SELECTION_TABLE, children=EMPTY_MESSAGE, className="selection"),
            html.Button("Download CSV", id=ids.SELECTION_CSV_BUTTON, n_clicks=0, disabled=True),
            dcc.Download(id=ids.SELECTION_DOWNLOAD)]


def _whole_numbers(values, limit: int) -> np.ndarray | None:
    """int64 array of ``values`` when it is a list of at most ``limit`` ints (not bools), else None."""
    if not isinstance(values, list) or len(values) > limit:
        return None
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return None
    try:
        return np.asarray(values, dtype=np.int64).reshape(-1)
    except OverflowError:
        return None


def selected_points(payload, n_tokens: int) -> np.ndarray | None:
    """Sorted unique int64 joint-layout indices of a relayed selection (``{curves, points, ...}``) of the queries
    and keys traces; None when the payload is not one (wrong types, unequal lengths, more than ``2 * n_tokens``
    points). Points of other traces, or outside their trace's range, are left out."""
    if not isinstance(payload, dict):
        return None
    limit = 2 * n_tokens
    curves, points = _whole_numbers(payload.get("curves"), limit), _whole_numbers(payload.get("points"), limit)
    if curves is None or points is None or len(curves) != len(points):
        return None
    in_range = (((curves == 0) & (points >= 0) & (points < n_tokens))
                | ((curves == 1) & (points >= n_tokens) & (points < limit)))
    return np.unique(points[in_range])


def sentence_parts(text: str, start: int, end: int, position: int, token: str) -> tuple[str, str, str]:
    """``(before, token, after)``: ``text`` cut around characters ``start:end``; a token without characters (a
    special token, ``start < 0``) goes before the text at position 0, after it elsewhere."""
    if start < 0:
        return ("", token, f" {text}") if position == 0 else (f"{text} ", token, "")
    return text[:start], text[start:end], text[end:]


def marked_sentence(text: str, start: int, end: int, position: int, token: str) -> str:
    """``text`` with the token between :data:`MARK_OPEN` and :data:`MARK_CLOSE` (see :func:`sentence_parts`)."""
    before, marked, after = sentence_parts(text, start, end, position, token)
    return f"{before}{MARK_OPEN}{marked}{MARK_CLOSE}{after}"


def selection_frame(data: RunData, layer: int, head: int, points: np.ndarray) -> pd.DataFrame:
    """One row per joint-layout point of head ``(layer, head)`` in ``points`` (in that order): :data:`COLUMNS`."""
    n_tokens = data.run.n_tokens
    points = np.asarray(points, dtype=np.int64)
    tokens = points % n_tokens
    rows = data.tokens.iloc[tokens]
    texts = data.sentences.text.to_numpy()[rows.sentence.to_numpy()]
    in_sentence = [marked_sentence(text, int(start), int(end), int(position), str(token))
                   for text, start, end, position, token in zip(texts, rows.char_start, rows.char_end, rows.position,
                                                                 rows.token)]
    return pd.DataFrame({
        "token": rows.token.to_numpy(), "in_sentence": in_sentence,
        "kind": np.where(points >= n_tokens, "key", "query"),
        "norm": data.norms(layer, head)[points].astype(np.float64),
        "position": rows.position.to_numpy(np.int64), "sentence": rows.sentence.to_numpy(np.int64),
        "point": points, "layer": layer, "head": head}, columns=list(COLUMNS))


def marked_cell(data: RunData, token: int) -> html.Td:
    """A table cell of the token's sentence with the token in bold (plain text children only)."""
    row = data.tokens.iloc[token]
    before, marked, after = sentence_parts(data.sentences.text.iat[int(row.sentence)], int(row.char_start),
                                           int(row.char_end), int(row.position), str(row.token))
    return html.Td([before, html.B(marked), after], className="in-sentence")


def selection_table(data: RunData, frame: pd.DataFrame) -> list:
    """The panel's children: how many points are selected, and the first :data:`SHOWN_ROWS` rows."""
    count = len(frame)
    if count == 0:
        return [html.Div("No query or key in the selection.")]
    shown = frame.head(SHOWN_ROWS)
    header = html.Tr([html.Th(name) for name in ("token", "in its sentence", "", "norm", "pos", "sent", "point")])
    body = [html.Tr([html.Td(str(row.token)), marked_cell(data, row.point % data.run.n_tokens), html.Td(row.kind[0]),
                     html.Td(f"{row.norm:.2f}"), html.Td(str(row.position)), html.Td(str(row.sentence)),
                     html.Td(str(row.point))], className=f"selected-{row.kind}")
            for row in shown.itertuples()]
    queries = int((frame.kind == "query").sum())
    summary = f"{count:,} points selected ({queries:,} queries, {count - queries:,} keys)"
    if count > SHOWN_ROWS:
        summary += f"; the first {SHOWN_ROWS} shown, the CSV holds all"
    return [html.Div(summary, className="hint"), html.Table([html.Thead(header), html.Tbody(body)],
                                                             className="selection-table")]


def shown_selection(shown, payload, runs: list[RunData]) -> tuple[RunData, int, int, np.ndarray] | None:
    """``(data, layer, head, points)`` of the table shown (the ``SELECTION_SHOWN`` store) and the relayed
    selection, both client values checked again; None when either is not valid."""
    if not isinstance(shown, dict):
        return None
    run, layer, head = (shown.get(name) for name in ("run", "layer", "head"))
    valid = all(isinstance(value, int) and not isinstance(value, bool) for value in (run, layer, head))
    if not valid or not 0 <= run < len(runs):
        return None
    data = runs[run]
    if not (0 <= layer < data.run.n_layers and 0 <= head < data.run.n_heads):
        return None
    points = selected_points(payload, data.run.n_tokens)
    return None if points is None or len(points) == 0 else (data, layer, head, points)


def register(app: dash.Dash, runs: list[RunData]) -> None:
    """Relay the single graph's selection; fill the table from it (cleared when another head is shown); send the
    CSV of the shown selection."""
    app.clientside_callback(ClientsideFunction(NAMESPACE, "selectionEvent"), Output(ids.SINGLE_SELECTION, "data"),
                            Input(ids.SINGLE_GRAPH, "selectedData"), State(ids.SINGLE_GRAPH, "id"),
                            prevent_initial_call=True)

    @app.callback(Output(ids.SELECTION_TABLE, "children"), Output(ids.SELECTION_SHOWN, "data"),
                  Output(ids.SELECTION_CSV_BUTTON, "disabled"),
                  Input(ids.SINGLE_SELECTION, "data"), Input(ids.view_state("single"), "data"), State(ids.SELECTION_SHOWN, "data"),
                  prevent_initial_call=True)
    def show_selection(payload, current, shown):
        if current is None:                     # the single view has not shown yet
            raise PreventUpdate
        state = checked_state(current, runs)
        key = {"run": state.run, "layer": state.layer, "head": state.head}
        if dash.ctx.triggered_id != ids.SINGLE_SELECTION:
            # another head (or run) drops the table; any other change of the state leaves it
            if isinstance(shown, dict) and {name: shown.get(name) for name in key} != key:
                return EMPTY_MESSAGE, None, True
            raise PreventUpdate
        data = runs[state.run]
        points = selected_points(payload, data.run.n_tokens)
        if points is None or len(points) == 0:
            return ("The selection could not be read." if points is None else EMPTY_MESSAGE), None, True
        frame = selection_frame(data, state.layer, state.head, points)
        data.selection = frame
        return selection_table(data, frame), {**key, "count": len(frame)}, False

    @app.callback(Output(ids.SELECTION_DOWNLOAD, "data"), Input(ids.SELECTION_CSV_BUTTON, "n_clicks"),
                  State(ids.SELECTION_SHOWN, "data"), State(ids.SINGLE_SELECTION, "data"), prevent_initial_call=True)
    def download_selection(clicks, shown, payload):
        selection = shown_selection(shown, payload, runs)
        if not clicks or selection is None:
            return no_update
        data, layer, head, points = selection
        frame = selection_frame(data, layer, head, points)
        return dcc.send_data_frame(frame.to_csv, f"{data.name}-L{layer}H{head}-selection.csv", index=False)
