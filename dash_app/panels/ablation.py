"""The single-head view's "ablate" action: whether the head shown matters (:func:`qkviz.probes.ablate`).

A button (with the mode, zero or mean) asks for the head's ablation over the whole run: the run's model is run over
the run's sequences clean and with the head's output removed, which takes seconds to minutes, so it runs in the
app's model worker (:class:`~dash_app.explain_worker.ExplainWorker`, the why panel's: one model pass at a time, off
the request thread, queued for the page as an ablation in the panel's place for its head, :func:`job_request`) and
the panel polls until it is in. A server that runs no model (``qkviz serve --no-model``) disables the button and
says so. The panel then shows the mean change over the run (next-token loss in nats; an encoder: the relative
change of its last hidden state, said so) and the tokens it changes most, each with its context. Another head
clears the panel; every value the callback receives (the state, the mode, the subject the page holds, the page's
session) is checked again on the server (:func:`checked_subject`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.explain_worker import Answer, ExplainWorker, ModelLimits, Request, checked_session, pending_work
from dash_app.panels.atlas import marked_tokens
from dash_app.data.run_data import RunData
from dash_app.state.view_state import checked_state
from qkviz.probes import ablate, most_affected

MODES = ("zero", "mean")
#: tokens listed, largest change first
TOP_TOKENS = 8
POLL_MS = 1000


@dataclass(frozen=True)
class Subject:
    """Head ``(layer, head)`` of run ``run`` ablated by ``mode``."""

    run: int
    layer: int
    head: int
    mode: str

    def as_dict(self) -> dict:
        return asdict(self)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def checked_mode(value) -> str:
    """The mode the page sent, if it is one; else ``"zero"``."""
    return value if isinstance(value, str) and value in MODES else MODES[0]


def checked_subject(value, runs: list[RunData]) -> Subject | None:
    """The subject the page sent back (the panel's store), if the server could have made it; else None."""
    if not isinstance(value, dict) or value.get("mode") not in MODES:
        return None
    run, layer, head = value.get("run"), value.get("layer"), value.get("head")
    if not all(_whole(number) for number in (run, layer, head)) or not 0 <= run < len(runs):
        return None
    stored = runs[run].run
    if runs[run].patches is not None or not (0 <= layer < stored.n_layers and 0 <= head < stored.n_heads):
        return None
    return Subject(run, layer, head, value["mode"])


def compute(data: RunData, subject: Subject) -> pd.DataFrame:
    """The head's ablation over the run (in the worker's thread)."""
    return ablate(data.run, subject.layer, subject.head, subject.mode)


def token_row(data: RunData, row) -> html.Tr:
    token = int(row.token_index)
    return html.Tr([html.Td(str(row.token)), html.Td(marked_tokens(data, int(row.sentence), [(token, "q")]),
                                                     className="excerpt"),
                    html.Td(f"{float(row.change):+.3f}")])


def render_result(data: RunData, subject: Subject, frame: pd.DataFrame) -> list:
    """The mean change and the tokens changed most."""
    attrs = frame.attrs
    loss = attrs["measure"] == "next-token loss"
    what = ("next-token loss change (nats; ablated − clean)" if loss
            else "hidden-state change (‖h_ablated − h_clean‖ / ‖h_clean‖ of the last layer; the model has no "
                 "language-model head here)")
    counted = int(frame.change.notna().sum())
    top = most_affected(frame, TOP_TOKENS)
    header = html.Tr([html.Th("token"), html.Th("context"), html.Th("change")])
    return [
        html.Div([f"Layer {subject.layer} head {subject.head}, {subject.mode}-ablated over {counted:,} tokens: "
                  "mean ", html.B(f"{attrs['mean_change']:+.4f}", className="ablation-mean"), f" {what}."]),
        html.Div("Tokens changed most" + (" (the token predicting the next one is marked):" if loss else ":"),
                 className="hint"),
        html.Table([html.Thead(header), html.Tbody([token_row(data, row) for row in top.itertuples()])],
                   className="ablation-tokens"),
    ]


def job_request(data: RunData, subject: Subject, session) -> Request:
    """The worker's request for ``subject`` from the page ``session`` (checked): an ablation filling the panel's
    place for its head, over the run's longest sequence (it runs them all)."""
    longest = int(data.run.sentences.n_tokens.max()) if data.run.n_sentences else 0
    return Request(checked_session(session), "ablate", ("ablate", subject.run, subject.layer, subject.head), longest)


def render(data: RunData, subject: Subject, answer: Answer) -> list:
    if answer.busy is not None:
        return [html.Div(answer.busy, className="ablation-pending ablation-busy")]
    if answer.pending:
        doing = pending_work(answer)
        return [html.Div(f"Ablating layer {subject.layer} head {subject.head} ({subject.mode}) over the run: {doing} "
                         "twice over every sequence…", className="ablation-pending")]
    if answer.error is not None:
        return [html.Div(answer.error, className="message ablation-error")]
    return render_result(data, subject, answer.result)


def controls(limits: ModelLimits = ModelLimits()) -> list:
    """The heading, the mode and the button, the panel's body, its poll and the subject it shows; on a server that
    runs no model (``limits``), the button disabled and the line saying so."""
    off = limits.refusal(0)
    return [html.H4("Does this head matter?"),
            html.Div(className="controls", children=[
                dcc.RadioItems(id=ids.ABLATE_MODE, options=[{"label": f" {mode}", "value": mode} for mode in MODES],
                               value=MODES[0], inline=True),
                html.Button("Ablate this head", id=ids.ABLATE_BUTTON, n_clicks=0, disabled=off is not None,
                            title="remove the head's output and measure what changes over the run (runs the model)"),
            ]),
            html.Div(off, id=ids.ABLATE_OFF, className="hint", style={} if off else {"display": "none"}),
            dcc.Interval(id=ids.ABLATE_POLL, interval=POLL_MS, disabled=True), dcc.Store(id=ids.ABLATE_SHOWN),
            html.Div(id=ids.ABLATE_PANEL, className="ablation-panel", children=[])]


def register(app: dash.Dash, runs: list[RunData], worker: ExplainWorker, state_store: str) -> None:
    """A click ablates the state's head; the poll shows it when it is in; another head clears the panel."""

    @app.callback(Output(ids.ABLATE_PANEL, "children"), Output(ids.ABLATE_POLL, "disabled"),
                  Output(ids.ABLATE_SHOWN, "data"), Input(ids.ABLATE_BUTTON, "n_clicks"),
                  Input(ids.ABLATE_POLL, "n_intervals"), Input(state_store, "data"), State(ids.ABLATE_MODE, "value"),
                  State(ids.ABLATE_SHOWN, "data"), State(ids.PAGE_SESSION, "data"), prevent_initial_call=True)
    def show_ablation(_clicks, _tick, current, mode, shown_value, session):
        shown = checked_subject(shown_value, runs)
        trigger = dash.ctx.triggered_id
        if trigger == ids.ABLATE_POLL:
            if shown is None:
                return no_update, True, no_update
            subject = shown
        else:
            state = checked_state(current, runs)
            if current is None:
                raise PreventUpdate
            if trigger != ids.ABLATE_BUTTON:
                if shown is not None and (shown.run, shown.layer, shown.head) != (state.run, state.layer, state.head):
                    return [], True, None            # another head: its ablation is not this one's
                raise PreventUpdate
            if runs[state.run].patches is not None:
                return [html.Div("Ablation runs text runs' models.", className="message")], True, None
            subject = Subject(state.run, state.layer, state.head, checked_mode(mode))
        data = runs[subject.run]
        answer = worker.ask(("ablate", subject), lambda: compute(data, subject), job_request(data, subject, session))
        return render(data, subject, answer), not answer.pending, subject.as_dict()
