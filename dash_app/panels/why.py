"""The "why" panel: why a clicked query meets a clicked key, its logit split by the parts that wrote them, and what
the head writes at that query.

A *subject* is a head and the query and key tokens explained: one of each for a pair (a query clicked, then one of
its keys -- the state's ``point`` and ``pair_point``, see :func:`dash_app.state.view_state.select_point`; a cell of the
document view's map), or a lasso's queries and keys in the single view (:mod:`dash_app.panels.selection`). For a
pair the panel shows the logit and the two tokens, bars of the key-side split (the whole query against each part
that wrote the key, ``by="key"``), of the query side (``by="query"``) and of the rotary frequency bands
(``by="dimension"``), each its :data:`TOP_PARTS` largest and the rest as one bar, so that each set of bars adds up
to the logit; the pair table (query part x key part, ``by="pair"``); and what the head writes at the query: its
direct effect on the next token split by the tokens it read and by the parts that wrote their values, and the
tokens it promotes and suppresses (or the one line why not: an encoder has no unembedding). For a lasso, the
attention-weighted mean split of the selected queries' logits with the selected keys (:func:`qkviz.explain.explain_selection`).

The explanation runs the run's model, so it is computed by the app's :class:`~dash_app.explain_worker.ExplainWorker`
off the request thread, queued for the page (its session, :data:`dash_app.ids.PAGE_SESSION`) as an explanation in
the panel's place for its head (:func:`job_request`): the panel says it is being computed, or that the page's queue
is full ("busy"), and polls until it is in. A run whose model cannot be found (or whose family is refused), a
server that runs no model or not over so long a sequence (:class:`~dash_app.explain_worker.ModelLimits`) shows the
one-line reason. Every value the callbacks receive -- the state, the
relayed selection, the subject the page holds -- is checked again on the server (:func:`checked_subject`).

Each view that shows the panel places :func:`panel` (ids named after the view, :func:`dash_app.ids.why_ids`) and
calls :func:`register`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass

import dash
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate
from plotly.subplots import make_subplots

from dash_app import ids
from dash_app.explain_worker import Answer, ExplainWorker, Request, checked_session, pending_work
from dash_app.figure_parts import KEY_COLOUR, QUERY_COLOUR, plotly_text
from dash_app.panels.selection import selected_points
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState, checked_state, pairs_with
from qkviz import QkvizError
from qkviz.explain import explain_pair_splits, explain_selection, head_write_splits

#: bars of each side (and bands) drawn one each; the others are one bar "other N parts"
TOP_PARTS = 8
#: rows of the pair table (the others summed in its last row)
TOP_PAIRS = 10
#: tokens the head's output promotes, and suppresses, listed under "what it writes"
TOP_WRITTEN = 5
#: how often the page asks whether a pending explanation is in
POLL_MS = 500
BAND_COLOUR = "#3f4f8f"
BAR_PX = 17


@dataclass(frozen=True)
class Subject:
    """What the panel explains: head ``(layer, head)`` of run ``run``, the query tokens and the key tokens (rows of
    the run's token table, sorted). ``kind`` ``"pair"``: one of each; ``"selection"``: a lasso's."""

    kind: str
    run: int
    layer: int
    head: int
    queries: tuple[int, ...]
    keys: tuple[int, ...]

    def as_dict(self) -> dict:
        return {**asdict(self), "queries": list(self.queries), "keys": list(self.keys)}


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def checked_subject(value, runs: list[RunData]) -> Subject | None:
    """The subject the page sent back (the panel's store), if it is one the server could have made: known kind, run,
    head and tokens in range, a pair of one query and one key; else None."""
    if not isinstance(value, dict) or value.get("kind") not in ("pair", "selection"):
        return None
    run, layer, head = value.get("run"), value.get("layer"), value.get("head")
    if not all(_whole(number) for number in (run, layer, head)) or not 0 <= run < len(runs):
        return None
    n_tokens = runs[run].run.n_tokens
    if not (0 <= layer < runs[run].run.n_layers and 0 <= head < runs[run].run.n_heads):
        return None
    sides = []
    for name in ("queries", "keys"):
        tokens = value.get(name)
        if not isinstance(tokens, list) or not 0 < len(tokens) <= n_tokens:
            return None
        if not all(_whole(token) and 0 <= token < n_tokens for token in tokens):
            return None
        sides.append(tuple(sorted(set(tokens))))
    if value["kind"] == "pair" and not (len(sides[0]) == 1 and len(sides[1]) == 1):
        return None
    return Subject(value["kind"], run, layer, head, *sides)


def pair_subject(data: RunData, state: ViewState) -> Subject | None:
    """The state's pair (its ``point`` and ``pair_point``: a query and a key) in its head, or None (none clicked,
    or an image run: attribution splits text runs)."""
    n_tokens = data.run.n_tokens
    if data.patches is not None or not pairs_with(state.point, state.pair_point, n_tokens):
        return None
    query, key = sorted((state.point, state.pair_point))
    return Subject("pair", state.run, state.layer, state.head, (query,), (key - n_tokens,))


def selection_subject(data: RunData, state: ViewState, points: np.ndarray | None) -> Subject | None:
    """A lasso's queries and keys (joint-layout ``points``) in the state's head, or None when it holds no query or
    no key."""
    if points is None or data.patches is not None:
        return None
    n_tokens = data.run.n_tokens
    queries, keys = points[points < n_tokens], points[points >= n_tokens] - n_tokens
    if not len(queries) or not len(keys):
        return None
    return Subject("selection", state.run, state.layer, state.head, tuple(int(q) for q in queries),
                   tuple(int(k) for k in keys))


def explain(data: RunData, subject: Subject):
    """The subject's explanation (in the worker's thread): of a pair, ``{"splits": {by: frame}, "writes": ...}``,
    the writes being what the head writes at the query (:func:`qkviz.explain.head_write_splits`, on its next token)
    or the one line why it cannot be split (an encoder, no language-model head, the last token); of a lasso, a
    HeadCircuit."""
    if subject.kind == "pair":
        splits = explain_pair_splits(data.run, subject.layer, subject.head, subject.queries[0], subject.keys[0])
        return {"splits": splits, "writes": writes_at_query(data, subject)}
    return explain_selection(data.run, subject.layer, subject.head, list(subject.queries), list(subject.keys))


#: the latest queries' writes kept (:func:`writes_at_query`), each a few small tables
WRITES_KEPT = 64
_WRITES: OrderedDict = OrderedDict()
_WRITES_LOCK = threading.Lock()


def writes_at_query(data: RunData, subject: Subject) -> dict | str:
    """What the subject's head writes at its query (:func:`qkviz.explain.head_write_splits`), or the one line why not.
    It does not depend on the key, and it costs a pass of the sequence up to the query (no trace keeps the stream after
    the last layer), so the latest :data:`WRITES_KEPT` are kept by run, head and query: a further key of a query
    explained shows them at once. A refusal is not kept (the model may be there on the next click)."""
    key = (str(data.run.manifest["fingerprint"]), subject.layer, subject.head, subject.queries[0])
    with _WRITES_LOCK:
        if key in _WRITES:
            _WRITES.move_to_end(key)
            return _WRITES[key]
    try:
        writes = head_write_splits(data.run, subject.layer, subject.head, subject.queries[0], top=TOP_WRITTEN)
    except QkvizError as error:
        return str(error)
    with _WRITES_LOCK:
        _WRITES[key] = writes
        while len(_WRITES) > WRITES_KEPT:
            _WRITES.popitem(last=False)
    return writes


# -- what the panel draws ----------------------------------------------------------------------------------------
def top_and_rest(labels, values, top: int = TOP_PARTS, name: str = "parts") -> tuple[list[str], list[float]]:
    """The ``top`` largest ``|values|`` (their labels), and the rest summed as one ``"other N parts"``: the bars add
    up to what the values add up to."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(-np.abs(values), kind="stable")
    chosen, rest = order[:top], order[top:]
    shown_labels = [str(labels[index]) for index in chosen]
    shown_values = [float(values[index]) for index in chosen]
    if len(rest):
        shown_labels.append(f"other {len(rest)} {name}")
        shown_values.append(float(values[rest].sum()))
    return shown_labels, shown_values


def bars_figure(groups: list[tuple[str, list[str], list[float], str]]) -> go.Figure:
    """Horizontal bars, one subplot per ``(title, labels, values, colour)``, the largest at the top."""
    figure = make_subplots(rows=len(groups), cols=1, subplot_titles=[plotly_text(title) for title, *_ in groups],
                           vertical_spacing=0.35 / len(groups),
                           row_heights=[max(len(labels), 1) for _, labels, _, _ in groups])
    for row, (title, labels, values, colour) in enumerate(groups, start=1):
        figure.add_trace(go.Bar(x=values, y=[plotly_text(label) for label in labels], orientation="h", name=title,
                                marker_color=colour, showlegend=False,
                                hovertemplate="%{y}: %{x:+.4f}<extra></extra>"), row=row, col=1)
        figure.update_yaxes(autorange="reversed", tickfont=dict(size=10), automargin=True, row=row, col=1)
        figure.update_xaxes(zeroline=True, zerolinecolor="#888", tickfont=dict(size=9), row=row, col=1)
    rows = sum(max(len(labels), 1) for _, labels, _, _ in groups)
    figure.update_layout(height=BAR_PX * rows + 70 * len(groups) + 20, margin=dict(l=10, r=10, t=30, b=20),
                         plot_bgcolor="white", bargap=0.2)
    figure.update_annotations(font_size=11)
    return figure


def token_line(data: RunData, token: int, side: str) -> html.Span:
    row = data.tokens.iloc[token]
    return html.Span([f"{side} ", html.B(f"“{row.token}”", className=f"why-{side}"),
                      f" (sentence {int(row.sentence)}, position {int(row.position)})"])


def pair_table(frame: pd.DataFrame) -> html.Table:
    """The pair split's :data:`TOP_PAIRS` largest rows (query part, key part, contribution), the rest in one row."""
    shown = frame.iloc[np.argsort(-frame.contribution.abs().to_numpy(), kind="stable")[:TOP_PAIRS]]
    rows = [html.Tr([html.Td(str(row.query_part)), html.Td(str(row.key_part)), html.Td(f"{row.contribution:+.3f}")])
            for row in shown.itertuples()]
    rest = len(frame) - len(shown)
    if rest > 0:
        rows.append(html.Tr([html.Td(f"other {rest} pairs", colSpan=2, className="hint"),
                             html.Td(f"{frame.contribution.sum() - shown.contribution.sum():+.3f}")]))
    header = html.Tr([html.Th("query part"), html.Th("key part"), html.Th("contribution")])
    return html.Table([html.Thead(header), html.Tbody(rows)], className="why-pairs")


def written_tokens(frame: pd.DataFrame) -> html.Table:
    """The tokens the head's output promotes most and suppresses most at the query, side by side, with the effect."""
    promoted, suppressed = frame[frame.direction == "promotes"], frame[frame.direction == "suppresses"]
    rows = [html.Tr([html.Td(f"“{up.token}”"), html.Td(f"{up.effect:+.3f}"), html.Td(f"“{down.token}”"),
                     html.Td(f"{down.effect:+.3f}")]) for up, down in zip(promoted.itertuples(), suppressed.itertuples())]
    header = html.Tr([html.Th("promotes", colSpan=2), html.Th("suppresses", colSpan=2)])
    return html.Table([html.Thead(header), html.Tbody(rows)], className="why-written")


def render_writes(writes) -> list:
    """"What it writes" at the query: the head's direct effect on the next token, split by the tokens it read and by
    the parts that wrote their values (each set of bars adds up to it), and the tokens it promotes and suppresses;
    or the one line why it cannot be split."""
    heading = html.H5("What it writes at the query", className="why-writes-heading")
    if isinstance(writes, str):
        return [heading, html.Div(writes, className="message why-writes-error")]
    by_source, by_part = writes["source"], writes["part"]
    labels = [f"{row.token} (token {row.source}, attention {row.attention:.2f})" for row in by_source.itertuples()]
    groups = [("from each token it read", *top_and_rest(labels, by_source.contribution, name="tokens"), KEY_COLOUR),
              ("the parts that wrote those values",
               *top_and_rest(by_part.part.to_numpy(), by_part.contribution), BAND_COLOUR)]
    attrs = by_source.attrs
    return [heading,
            html.Div(["its direct effect on the next token ", html.B(f"“{attrs['target_token']}”"), ": ",
                      html.B(f"{attrs['row']:+.4f}", className="why-writes-row"),
                      f" of the model's logit {attrs['logit']:+.4f}; each set of bars adds up to it."]),
            dcc.Graph(figure=bars_figure(groups), config={"displayModeBar": False}, className="why-writes-bars"),
            written_tokens(writes["tokens"])]


def render_pair(data: RunData, subject: Subject, explained: dict) -> list:
    """The panel for a pair: tokens, logit, the key-side, query-side and band bars, the pair table, and what the
    head writes at the query."""
    frames = explained["splits"]
    query, key = subject.queries[0], subject.keys[0]
    logit = frames["key"].attrs["logit"]
    softcap = frames["key"].attrs.get("softcap")
    bands = frames["dimension"]
    groups = [("key side (each part of the key)",
               *top_and_rest(frames["key"].part.to_numpy(), frames["key"].contribution), KEY_COLOUR),
              ("query side (each part of the query)",
               *top_and_rest(frames["query"].part.to_numpy(), frames["query"].contribution), QUERY_COLOUR),
              ("by rotary band" if bands.band.str.startswith("rotary").any() else "by dimension",
               *top_and_rest(bands.band.to_numpy(), bands.contribution, name="bands"), BAND_COLOUR)]
    tokens = data.tokens
    notes = []     # a pair the head's mask forbids never gets here: run.explain refuses it in one line, shown instead
    if softcap:
        notes.append(f"Split before the model's soft cap ({softcap:g}).")
    if tokens.sentence.iat[query] != tokens.sentence.iat[key]:
        notes.append("The two tokens are in different sentences (as partner search pairs them).")
    return [
        html.Div([token_line(data, query, "query"), html.Br(), token_line(data, key, "key")]),
        html.Div([f"layer {subject.layer} head {subject.head}: logit ",
                  html.B(f"{logit:+.4f}", className="why-logit"), " (scale · q · k, before the softmax); each set of "
                  "bars adds up to it."]),
        *(html.Div(note, className="hint") for note in notes),
        dcc.Graph(figure=bars_figure(groups), config={"displayModeBar": False}, className="why-bars"),
        html.Div("query part × key part:", className="hint"),
        pair_table(frames["pair"]),
        *render_writes(explained["writes"]),
    ]


def render_selection(data: RunData, subject: Subject, circuit) -> list:
    """The panel for a lasso: the attention-weighted mean split of its queries' logits with its keys, by side."""
    table = circuit.table
    groups = []
    for side, colour in (("key", KEY_COLOUR), ("query", QUERY_COLOUR)):
        rows = table[table.side == side]
        groups.append((f"{side} side", *top_and_rest(rows.part.to_numpy(), rows.contribution), colour))
    lifts = table.set_index(["side", "part"]).lift
    strongest = [f"{side}: {part} (lift {lifts[(side, part)]:+.3f})" for side in ("key", "query")
                 for part in table[table.side == side].part.head(1)]
    return [
        html.Div(f"Lasso in layer {subject.layer} head {subject.head}: {len(subject.queries):,} queries, "
                 f"{len(subject.keys):,} keys, over {len(circuit.sample.get('sentences', ())):,} sentences."),
        html.Div(["attention-weighted mean logit ", html.B(f"{circuit.mean_logit:+.4f}", className="why-logit"),
                  "; each side's bars add up to it."]),
        html.Div("strongest parts: " + "; ".join(strongest), className="hint"),
        dcc.Graph(figure=bars_figure(groups), config={"displayModeBar": False}, className="why-bars"),
    ]


def render(data: RunData, subject: Subject, answer: Answer) -> list:
    """The panel's children for ``answer``: being computed, the one-line reason it could not be, or the split."""
    if answer.busy is not None:
        return [html.Div(answer.busy, className="why-pending why-busy")]
    if answer.pending:
        what = "this pair" if subject.kind == "pair" else "the selection"
        doing = pending_work(answer)
        return [html.Div(f"Explaining {what} in layer {subject.layer} head {subject.head}: {doing}…",
                         className="why-pending")]
    if answer.error is not None:
        return [html.Div(answer.error, className="message why-error")]
    if subject.kind == "pair":
        return render_pair(data, subject, answer.result)
    return render_selection(data, subject, answer.result)


def sequence_tokens(data: RunData, subject: Subject) -> int:
    """The longest sequence explaining ``subject`` runs the model over (in tokens): a pair's query's and key's, a
    lasso's sequences holding both a query and a key (:func:`qkviz.explain.explain_selection`)."""
    sentences = data.run.tokens.sentence.to_numpy()
    read = set(sentences[list(subject.queries)].tolist())
    if subject.kind == "pair":
        read |= set(sentences[list(subject.keys)].tolist())
    else:
        read &= set(sentences[list(subject.keys)].tolist())
    lengths = data.run.sentences.n_tokens.to_numpy()
    return int(max((lengths[sentence] for sentence in read), default=0))


def job_request(data: RunData, subject: Subject, view: str, session) -> Request:
    """The worker's request for ``subject`` from ``view``'s panel of the page ``session`` (checked): an explanation
    filling the panel's place for its head, over :func:`sequence_tokens`."""
    return Request(checked_session(session), "explain", ("why", view, subject.run, subject.layer, subject.head),
                   sequence_tokens(data, subject))


def panel(view: str) -> list:
    """The panel's heading, body, poll and the subject it shows (hidden until there is one)."""
    names = ids.why_ids(view)
    return [dcc.Interval(id=names.poll, interval=POLL_MS, disabled=True), dcc.Store(id=names.shown),
            html.Div(id=names.panel, className="why-panel", style={"display": "none"}, children=[])]


def heading() -> html.H4:
    return html.H4("Why this pair")


def register(app: dash.Dash, runs: list[RunData], worker: ExplainWorker, view: str,
             selection_store: str | None = None) -> None:
    """Show the subject of ``view``'s state (its pair) or, when ``selection_store`` is given, of a lasso relayed
    there; poll while it is being computed."""
    names = ids.why_ids(view)
    inputs = [Input(ids.view_state(view), "data"), Input(names.poll, "n_intervals")]
    if selection_store is not None:
        inputs.append(Input(selection_store, "data"))

    @app.callback(Output(names.panel, "children"), Output(names.panel, "style"), Output(names.poll, "disabled"),
                  Output(names.shown, "data"), *inputs, State(names.shown, "data"), State(ids.PAGE_SESSION, "data"),
                  prevent_initial_call=True)
    def show_why(current, _tick, *rest):
        payload = rest[0] if selection_store is not None else None
        shown_value, session = rest[-2:]
        shown = checked_subject(shown_value, runs)
        trigger = dash.ctx.triggered_id
        if trigger == names.poll:
            if shown is None:
                return no_update, no_update, True, no_update
            subject = shown
        else:
            state = checked_state(current, runs)
            if current is None or state.view != view:
                raise PreventUpdate
            data = runs[state.run]
            subject = None
            if trigger == selection_store:
                subject = selection_subject(data, state, selected_points(payload, data.run.n_tokens))
            if subject is None:
                subject = pair_subject(data, state)
                same_head = shown is not None and (shown.run, shown.layer, shown.head) == (state.run, state.layer,
                                                                                            state.head)
                if subject is None and trigger != selection_store and same_head and shown.kind == "selection":
                    raise PreventUpdate          # the lasso's explanation stays until another pair or head
            if subject is not None and subject == shown and trigger != selection_store:
                raise PreventUpdate              # the state written again: this subject is shown
        if subject is None:
            return [], {"display": "none"}, True, None
        data = runs[subject.run]
        answer = worker.ask(subject, lambda: explain(data, subject), job_request(data, subject, view, session))
        return ([heading(), *render(data, subject, answer)], {"display": "block"}, not answer.pending,
                subject.as_dict())
