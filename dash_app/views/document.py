"""Document view: one head's attention over a whole long document (thousands of tokens, up to the model's context).

The map is every query (rows, the document's first token at the top) against every key (columns), drawn as one
image made on the server at the plot's own resolution: each pixel is the max (or mean) weight of the query-key
cells it covers, on a log scale, the pairs the model's mask forbids in grey (so the causal triangle and a sliding
window's band show). Zooming (a box, the scroll wheel, a pan) asks the server for the region on screen, drawn
again at screen resolution, down to single tokens labelled on both axes; the token strip under the map follows
the zoom. Beside it, the head's profile over the document: attention mass against distance, on the first and the
special tokens, the previous-token score and, over a repeated passage, the induction score. The weighting switch
(the state's ``weighting``) draws all of it value-weighted: each weight times its key's ``|W_O^h v_j|`` (``|v_j|``
in a run without output norms), every query's row rescaled to its share.

Everything is computed by :mod:`qkviz.analysis.documents.document_attention` from the stored queries and keys, block by
block (never the ``n^2`` weights at once); the view only colours and sends it, at most :data:`MAP_PIXELS` squared
pixels a request. The short-sentence view (lines between tokens) is :mod:`dash_app.views.sentence`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache

import dash
import numpy as np
from dash import Input, Output, Patch, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.state.control_options import (head_options, layer_options, offered_sequences, run_changed, weighting_options,
                                            weighting_switch)
from dash_app.state.events import event_fields, relay_graph_event
from dash_app.export import export_buttons
from dash_app.figure_parts import plotly_texts
from dash_app.panels import why as why_panel
from dash_app.data.run_data import RunData, RunShape
from dash_app.views.document_figure import (LABELLED_TOKENS, MAP_PIXELS, axis_labels, colour_key, image_trace,
                                            map_figure, profile_figure, scores_table, token_strip)
from dash_app.state.view_state import MAX_SEARCH, ViewState, checked_state, select_pair
from dash_app.state.view_registry import AppContext, View, register_view
from qkviz.analysis import (DocumentHead, HeadProfile, PooledMap, RepeatedSpan, document_head, document_overview,
                            moved_norms, pooled_attention, repeated_span)

#: the longest document drawn (a whole map's cost grows with its square: 8,192 tokens took 2.5-3.9 s of one
#: core on the shared 2-core machine under load)
MAX_DOCUMENT_TOKENS = 32_768
#: the smallest region a zoom draws, in tokens a side
MIN_REGION = 4
DOCUMENTS_OFFERED = 200
#: heads whose whole map and profile are kept per run
HEADS_KEPT = 8
POOLS = [{"label": "max per pixel", "value": "max"}, {"label": "mean per pixel", "value": "mean"}]
VIEW_NAME = "document"


def layout(_context: AppContext) -> html.Div:
    return html.Div(id=ids.DOCUMENT_VIEW, style={"display": "none"}, children=[
        html.Div(className="controls", children=[
            html.Label("Layer"), dcc.Dropdown(id=ids.DOCUMENT_LAYER, clearable=False, style={"width": "80px"}),
            html.Label("Head"), dcc.Dropdown(id=ids.DOCUMENT_HEAD, clearable=False, style={"width": "80px"}),
            html.Label("Document"), dcc.Dropdown(id=ids.DOCUMENT_SELECT, clearable=False, style={"width": "520px"}),
            dcc.RadioItems(id=ids.DOCUMENT_POOL, options=POOLS, value="max", inline=True),
            weighting_switch(ids.DOCUMENT_WEIGHTING),
            export_buttons(ids.DOCUMENT_GRAPH, "document"),
        ]),
        html.Div(id=ids.DOCUMENT_MESSAGE, className="info"),
        html.Div(style={"display": "flex", "gap": "16px", "alignItems": "flex-start"}, children=[
            html.Div(children=[
                dcc.Graph(id=ids.DOCUMENT_GRAPH, figure={"data": [], "layout": {"height": 100}},
                          config={"displaylogo": False, "scrollZoom": True, "responsive": False,
                                  "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}),
                colour_key(),
            ]),
            html.Div(style={"minWidth": "360px"}, children=[
                dcc.Graph(id=ids.DOCUMENT_PROFILE, config={"displayModeBar": False},
                          figure={"data": [], "layout": {"height": 100}}),
                html.Div(id=ids.DOCUMENT_SCORES),
                html.Div(children=why_panel.panel(VIEW_NAME)),
            ]),
        ]),
        html.Div(id=ids.DOCUMENT_STRIP, className="document-strip",
                 style={"fontFamily": "monospace", "fontSize": "12px", "whiteSpace": "pre-wrap", "maxWidth": "1300px"}),
    ])


# -- what the view computes, through qkviz.analysis -------------------------------------------------------------
class DocumentCache:
    """Per run: each document's repeated passage and special tokens, and the last heads' whole maps and profiles
    (a head switch back is immediate). A head asked for again while it is being computed (the browser repeats a
    request whose inputs were written again) waits for that computation instead of starting another."""

    def __init__(self, data: RunData):
        self.data = data
        self.passage = lru_cache(maxsize=16)(self._passage)
        self._lock = threading.Lock()
        self._done: OrderedDict[tuple, tuple[PooledMap, HeadProfile]] = OrderedDict()
        self._running: dict[tuple, threading.Event] = {}

    def rows(self, document: int) -> slice:
        return self.data.run.sentence_tokens(document)

    def _passage(self, document: int) -> tuple[np.ndarray, RepeatedSpan | None]:
        tokens = self.data.tokens.iloc[self.rows(document)]
        return tokens.is_special.to_numpy(bool), repeated_span(tokens.token_id.to_numpy())

    def head(self, layer: int, head: int, document: int, weighting: str = "attention") -> DocumentHead:
        """The head over the document; value-weighted with ``weighting`` ``"value"``."""
        weights = moved_norms(self.data.run, layer, head) if weighting == "value" else None
        return document_head(self.data.run, layer, head, document, weights)

    def whole(self, layer: int, head: int, document: int, pool: str,
              weighting: str = "attention") -> tuple[PooledMap, HeadProfile]:
        """The whole map and the profile of a head (computed once, however many requests ask at the same time)."""
        key = (layer, head, document, pool, weighting)
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            running = self._running.get(key)
            if running is None:
                self._running[key] = threading.Event()
        if running is not None:
            running.wait()
            with self._lock:
                if key in self._done:
                    return self._done[key]
        try:
            special, repeat = self.passage(document)
            result = document_overview(self.head(layer, head, document, weighting), special, repeat,
                                       (MAP_PIXELS, MAP_PIXELS), pool)
            with self._lock:
                self._done[key] = result
                while len(self._done) > HEADS_KEPT:
                    self._done.popitem(last=False)
            return result
        finally:
            with self._lock:
                event = self._running.pop(key, None)
            if event is not None:
                event.set()

    def region(self, layer: int, head: int, document: int, pool: str, rows: tuple[int, int],
               columns: tuple[int, int], weighting: str = "attention") -> PooledMap:
        """The map of a region (the whole map from the cache)."""
        n = self.rows(document).stop - self.rows(document).start
        if rows == (0, n) and columns == (0, n):
            return self.whole(layer, head, document, pool, weighting)[0]
        return pooled_attention(self.head(layer, head, document, weighting), rows, columns, (MAP_PIXELS, MAP_PIXELS),
                                pool)


def document_options(data: RunData, typed: str = "", current: int | None = None,
                     limit: int = DOCUMENTS_OFFERED) -> list[dict]:
    """``"2: 3,060 tokens · Down the Rabbit-Hole …"``: the first ``limit`` documents whose text holds ``typed``
    or whose number starts with it, and the ``current`` one."""
    texts, lengths = data.sentences.text.to_numpy(), data.sentences.n_tokens.to_numpy()
    return [{"label": f"{index}: {int(lengths[index]):,} tokens · {str(texts[index])[:70]}…", "value": index}
            for index in offered_sequences(texts, typed, current, limit)]


def offered_documents(data: RunData, state: ViewState, previous: ViewState | None):
    """The selector's options, sent when the run or the document changes."""
    changed = run_changed(state, previous) or previous.sentence != state.sentence
    return document_options(data, "", state.sentence) if changed else no_update


# -- requests --------------------------------------------------------------------------------------------------
def zoomed_region(relayout, drawn: dict | None, n: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The region ``(rows, columns)`` a graph's ``relayoutData`` shows, checked: finite numbers, clipped to the
    document, at least :data:`MIN_REGION` tokens a side; an axis it does not name keeps the ``drawn`` region's
    range; autorange is the whole document. None when it names no axis range."""
    if not isinstance(relayout, dict):
        return None
    region = {"xaxis": drawn_range(drawn, "columns", n), "yaxis": drawn_range(drawn, "rows", n)}
    named = False
    for axis in region:
        if relayout.get(f"{axis}.autorange") is True:
            region[axis], named = (0, n), True
            continue
        ends = relayout.get(f"{axis}.range")
        if not isinstance(ends, list) or len(ends) != 2:
            ends = [relayout.get(f"{axis}.range[0]"), relayout.get(f"{axis}.range[1]")]
        if not all(finite(end) for end in ends):
            continue
        low, high = sorted(float(end) for end in ends)
        start = int(np.clip(np.floor(low - 0.5) + 1, 0, n - 1))        # token j's cell is [j - 0.5, j + 0.5]
        stop = int(np.clip(np.ceil(high + 0.5), start + 1, n))
        if stop - start < MIN_REGION:                                   # widened about its middle
            start = max(0, min((start + stop) // 2 - MIN_REGION // 2, n - MIN_REGION))
            stop = min(n, start + MIN_REGION)
        region[axis], named = (start, stop), True
    return (region["yaxis"], region["xaxis"]) if named else None


def finite(value) -> bool:
    """Whether a value from the browser is a finite number (not a bool, a string, None or NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and bool(np.isfinite(value))


def drawn_range(drawn, axis: str, n: int) -> tuple[int, int]:
    """The ``rows`` or ``columns`` ``[start, stop)`` of the region store as the browser sent it back, if it is one
    inside the document, else the whole document."""
    ends = drawn.get(axis) if isinstance(drawn, dict) else None
    if (isinstance(ends, list) and len(ends) == 2 and all(isinstance(end, int) and not isinstance(end, bool)
                                                          for end in ends) and 0 <= ends[0] < ends[1] <= n):
        return ends[0], ends[1]
    return 0, n


def checked_pool(pool) -> str:
    return pool if pool in ("max", "mean") else "max"


def register(app: dash.Dash, context: AppContext) -> None:
    """Draw the whole map and the profile when the view opens or its head, document or pooling change; draw the
    region on screen again after each zoom or pan (a Patch of the image, the axes' labels and the strip)."""
    runs = context.runs
    caches = [DocumentCache(data) for data in runs]

    def shown(current, pool) -> tuple[ViewState, RunData, DocumentCache, str, slice]:
        """The state, run, cache, pooling and document rows of a request; PreventUpdate unless the view shows."""
        state = checked_state(current, runs)
        if current is None or state.view != VIEW.name:
            raise PreventUpdate
        return state, runs[state.run], caches[state.run], checked_pool(pool), caches[state.run].rows(state.sentence)

    @app.callback(Output(ids.DOCUMENT_GRAPH, "figure"), Output(ids.DOCUMENT_PROFILE, "figure"),
                  Output(ids.DOCUMENT_SCORES, "children"), Output(ids.DOCUMENT_STRIP, "children"),
                  Output(ids.DOCUMENT_MESSAGE, "children"), Output(ids.DOCUMENT_REGION, "data"),
                  Input(VIEW.state_store, "data"), Input(ids.DOCUMENT_POOL, "value"), State(ids.DOCUMENT_REGION, "data"),
                  prevent_initial_call=True)
    def draw_document(current, pool, drawn):
        state, data, cache, pool, rows = shown(current, pool)
        if isinstance(drawn, dict) and drawn.get("key") == map_key(state, pool):
            raise PreventUpdate                 # the state written again (another control's echo): this map is drawn
        return whole_document(state, data, cache, pool, rows)

    @app.callback(Output(ids.DOCUMENT_GRAPH, "figure", allow_duplicate=True),
                  Output(ids.DOCUMENT_STRIP, "children", allow_duplicate=True),
                  Output(ids.DOCUMENT_REGION, "data", allow_duplicate=True),
                  Input(ids.DOCUMENT_GRAPH, "relayoutData"), State(VIEW.state_store, "data"),
                  State(ids.DOCUMENT_POOL, "value"), State(ids.DOCUMENT_REGION, "data"), prevent_initial_call=True)
    def draw_region(relayout, current, pool, drawn):
        """The region on screen after a zoom or pan, drawn again (only the image, the axes' labels and the strip)
        when it is of the map drawn (its key) and another region."""
        state, data, cache, pool, rows = shown(current, pool)
        key = map_key(state, pool)
        if not isinstance(drawn, dict) or drawn.get("key") != key:
            raise PreventUpdate
        region = zoomed_region(relayout, drawn, rows.stop - rows.start)
        if region is None or [list(region[0]), list(region[1])] == [drawn["rows"], drawn["columns"]]:
            raise PreventUpdate
        texts = data.tokens.token.to_numpy()[rows]
        pooled = cache.region(state.layer, state.head, state.sentence, pool, *region, state.weighting)
        patch = Patch()
        patch["data"][0] = image_trace(pooled)
        patch["layout"]["xaxis"].update(axis_labels(*region[1], plotly_texts(texts)))
        patch["layout"]["yaxis"].update(axis_labels(*region[0], plotly_texts(texts)))
        return patch, token_strip(texts, *region), {"key": key, "rows": list(region[0]), "columns": list(region[1])}

    @app.callback(Output(ids.DOCUMENT_SELECT, "options", allow_duplicate=True),
                  Input(ids.DOCUMENT_SELECT, "search_value"), State(ids.STATE, "data"), prevent_initial_call=True)
    def offer_documents(typed, current):
        """The documents matching what is typed in the selector (the state callback sets its first options)."""
        state = checked_state(current, runs)
        typed = typed[:MAX_SEARCH] if isinstance(typed, str) else ""
        return document_options(runs[state.run], typed, state.sentence)

    relay_graph_event(app, "cellEvent", ids.DOCUMENT_GRAPH, "clickData", ids.DOCUMENT_CLICK)
    why_panel.register(app, runs, context.explanations, VIEW_NAME)


def map_key(state: ViewState, pool: str) -> list:
    """What a drawn map is of: run, document, head, pooling and weighting (a zoom applies only to its own map)."""
    return [state.run, state.sentence, state.layer, state.head, pool, state.weighting]


def whole_document(state: ViewState, data: RunData, cache: DocumentCache, pool: str, rows: slice) -> tuple:
    """The whole document's map, profile, scores, strip, message and drawn region (or a message why not)."""
    n = rows.stop - rows.start
    if data.patches is not None:
        return (no_update, no_update, [], [], "The document view is for text runs; an image's attention is in the "
                "Sentence / image view.", None)
    if n > MAX_DOCUMENT_TOKENS:
        return (no_update, no_update, [], [], f"Document {state.sentence} has {n:,} tokens; the view draws "
                f"documents of at most {MAX_DOCUMENT_TOKENS:,}.", None)
    key = map_key(state, pool)
    texts = data.tokens.token.to_numpy()[rows]
    pooled, profile = cache.whole(state.layer, state.head, state.sentence, pool, state.weighting)
    _, repeat = cache.passage(state.sentence)
    title = (f"{data.name}: layer {state.layer} head {state.head}, document {state.sentence} ({n:,} tokens)"
             + (", value-weighted" if state.weighting == "value" else ""))
    figure = map_figure(pooled, plotly_texts(texts), title, "-".join(map(str, key)))
    message = (f"Document {state.sentence}: {n:,} tokens, {pooled.values.shape[0]} × {pooled.values.shape[1]} "
               f"pixels, each the {pool} weight of its query-key cells. Drag a box or scroll to zoom (tokens are "
               f"labelled below {LABELLED_TOKENS + 1}); double-click for the whole document. Click a cell (zoomed "
               "in to single tokens) to see why its query meets its key.")
    return (figure, profile_figure(profile, state.weighting), scores_table(profile, repeat), token_strip(texts, (0, n), (0, n)),
            message, {"key": key, "rows": [0, n], "columns": [0, n]})


def select_clicked_cell(state: ViewState, event: dict | None, data: RunData, shape: RunShape) -> ViewState:
    """A click on the map's cell ``{row, column}`` (query and key positions in the document) selects that query and
    that key as the why panel's pair, when both are in the document."""
    cell = event_fields(event, ("row", "column"))
    if cell is None:
        return state
    rows = data.run.sentence_tokens(state.sentence)
    n = rows.stop - rows.start
    row, column = cell
    if not (0 <= row < n and 0 <= column < n):
        return state
    return select_pair(state, rows.start + row, rows.start + column, shape)


def offered(context: AppContext) -> bool:
    """A tab when some run is a text run (an image run's attention is in the sentence / image view)."""
    return any(data.patches is None for data in context.runs)


VIEW = register_view(View(
    name=VIEW_NAME, label="Document", order=35, layout=layout, register=register, offered=offered,
    stores=(ids.DOCUMENT_REGION, ids.DOCUMENT_CLICK), actions={(ids.DOCUMENT_CLICK, "data"): select_clicked_cell},
    repeats={ids.DOCUMENT_LAYER: "layer", ids.DOCUMENT_HEAD: "head", ids.DOCUMENT_SELECT: "sentence",
             ids.DOCUMENT_WEIGHTING: "weighting"},
    options={ids.DOCUMENT_LAYER: layer_options, ids.DOCUMENT_HEAD: head_options, ids.DOCUMENT_SELECT: offered_documents,
             ids.DOCUMENT_WEIGHTING: weighting_options},
    url_fields=("sentence",)))
