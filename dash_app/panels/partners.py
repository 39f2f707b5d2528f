"""The single view's "corpus partners" panel: the keys a clicked query scores highest anywhere in the
corpus (or the queries that score a clicked key highest), and how many of them the layout keeps near it.

The partners come from :class:`qkviz.search.partner_index.PartnerIndexes` (exact search on the run's
memory-mapped arrays, or past the exact limit the inverted files ``qkviz index`` built); the panel lists each with its logit and
its sentence (the token marked), and each is a button that selects that point. The same partners
are drawn as stars in the layout (the last overlay slot of :mod:`dash_app.views.single`).
Everything is Dash components with plain-text children: no token text is rendered as HTML.
:func:`register` adds the callback that lists them and the clientside relay of a button's click.
"""

from __future__ import annotations

import math

import dash
import numpy as np
from dash import ALL, Input, Output, dcc, html
from dash.exceptions import PreventUpdate

from dash_app import ids
from dash_app.state.events import partner_target, relay_button_clicks, select_joint_point
from dash_app.panels.atlas import marked_tokens
from dash_app.data.run_data import RunData, RunShape
from dash_app.state.view_state import ViewState, checked_state, string_list
from qkviz import QkvizError
from qkviz.search import LayoutOverlap, Partners, layout_overlap

DEFAULT_PARTNERS = 10
MAX_PARTNERS = 100
SKIP_SPECIAL = "skip_special"
SKIP_FIRST = "skip_first"
OPTIONS = [{"label": "skip special tokens", "value": SKIP_SPECIAL},
           {"label": "skip sentence-first tokens", "value": SKIP_FIRST}]
NO_POINT = "Click a query or key to list what it would attend to most anywhere in the corpus."


def controls() -> list:
    """The panel's heading, its two controls and its body (inside a loading indicator)."""
    return [
        html.H4("Corpus partners"),
        html.Div(className="controls", children=[
            html.Label("top"),
            dcc.Input(id=ids.PARTNER_K, type="number", min=1, max=MAX_PARTNERS, step=1, value=DEFAULT_PARTNERS,
                      style={"width": "55px"}),
            dcc.Checklist(id=ids.PARTNER_OPTIONS, options=OPTIONS, value=[], inline=True),
        ]),
        dcc.Loading(html.Div(id=ids.SINGLE_PARTNERS, children=NO_POINT), type="dot"),
    ]


def partner_count(value) -> int | None:
    """The number of partners asked for, or None when the box holds no whole number in 1..MAX_PARTNERS."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value != int(value):
        return None
    return int(value) if 1 <= value <= MAX_PARTNERS else None


def find_partners(data: RunData, state: ViewState, k: int, options: list[str] | None) -> Partners:
    """The clicked point's partners (cached); the run's QkvizError when its index cannot be had."""
    options = string_list(options)
    return data.partners(state.layer, state.head, state.point, k, SKIP_SPECIAL in options, SKIP_FIRST in options)


def describe_index(partners: Partners) -> str:
    info = partners.info
    if info.exact:
        return "exact search"
    return f"approximate index, recall@10 {info.recall_at_10:.2f} against exact (nprobe {info.nprobe}/{info.nlist})"


def overlap_lines(data: RunData, state: ViewState, partners: Partners) -> list:
    """How many of the partners the shown layout puts among the point's nearest points of the other
    kind, and the head's average over sampled points; nothing when the layout is not cached."""
    try:
        layout = data.layout(state.layer, state.head, state.method, state.dim)
    except QkvizError:
        return []
    overlap: LayoutOverlap = layout_overlap(partners, layout)
    average = data.layout_overlap(state.layer, state.head, state.method, state.dim)
    other = partners.partner_side + "s"
    return [
        html.Div(f"The {state.method.upper()} {state.dim}D layout puts {overlap.kept} of these {overlap.k} among "
                 f"the point's {overlap.k} nearest {other} (a random layout: {overlap.chance * overlap.k:.2f})."),
        html.Div(f"Over {average['sample']} sampled points of this head it keeps {100 * average['query']:.0f}% of a "
                 f"query's top-10 keys and {100 * average['key']:.0f}% of a key's top-10 queries "
                 f"(random: {100 * average['chance']:.1f}%).", className="hint"),
    ]


def partner_button(data: RunData, partners: Partners, rank: int, clicked_token: int) -> html.Button:
    """One partner: rank, token, logit and sentence (marked); a click selects it."""
    token = int(partners.tokens[rank])
    sentence = data.sentence_of(token)
    same = sentence == data.sentence_of(clicked_token)
    kinds = ("q", "k") if partners.partner_side == "key" else ("k", "q")
    marks = [(token, kinds[1])] + ([(clicked_token, kinds[0])] if same else [])
    return html.Button(
        id={"type": ids.PARTNER, "point": int(partners.points[rank])}, n_clicks=0, className="exemplar",
        title=f"select this {partners.partner_side}", children=[
            html.Div([f"{rank + 1}. ", html.B(str(data.tokens.token.iat[token])),
                      f"  logit {partners.logits[rank]:+.2f} · sentence {sentence}"
                      f"{' (same sentence)' if same else ''}, position {int(data.tokens.position.iat[token])}"]),
            html.Div(marked_tokens(data, sentence, marks), className="excerpt"),
        ])


def render_partners(data: RunData, state: ViewState, k_value, options: list[str] | None) -> list:
    """The panel's children for ``state``'s clicked point: a message, or the partner list."""
    if state.point is None:
        return [NO_POINT]
    k = partner_count(k_value)
    if k is None:
        return [f"Give a whole number of partners from 1 to {MAX_PARTNERS}."]
    try:
        partners = find_partners(data, state, k, options)
    except QkvizError as error:
        return [html.Div(str(error), className="message")]
    n_tokens = data.run.n_tokens
    clicked_token = state.point % n_tokens
    clicked_side = "query" if state.point < n_tokens else "key"
    heading = (f"Top {partners.k} {partners.partner_side}s of all {n_tokens:,} tokens for {clicked_side} "
               f"“{data.tokens.token.iat[clicked_token]}” ({describe_index(partners)}):")
    children = [html.Div(heading)]
    if partners.k < partners.requested_k:
        children.append(html.Div(f"Asked for {partners.requested_k}, but the corpus has only {partners.k} "
                                 f"{partners.partner_side}s to offer.", className="message"))
    children += overlap_lines(data, state, partners)
    children += [partner_button(data, partners, rank, clicked_token) for rank in range(partners.k)]
    return children


def partner_points(data: RunData, state: ViewState, k_value, options: list[str] | None) -> np.ndarray:
    """int64 joint-layout indices of the clicked point's partners, for the layout's stars (empty when none)."""
    k = partner_count(k_value)
    if state.point is None or k is None:
        return np.zeros(0, dtype=np.int64)
    try:
        return find_partners(data, state, k, options).points
    except QkvizError:
        return np.zeros(0, dtype=np.int64)


def select_clicked_partner(state: ViewState, event: dict | None, data: RunData, shape: RunShape) -> ViewState:
    """A click on a partner (``{point, timestamp}``) selects that point of the head's joint layout."""
    return select_joint_point(state, partner_target(event), data, shape)


def register(app: dash.Dash, runs: list[RunData]) -> None:
    """List the clicked point's partners when the state or the panel's controls change; relay a partner
    button's click to the state callback (``{point, timestamp}``)."""

    @app.callback(Output(ids.SINGLE_PARTNERS, "children"), Input(ids.view_state("single"), "data"), Input(ids.PARTNER_K, "value"),
                  Input(ids.PARTNER_OPTIONS, "value"), prevent_initial_call=True)
    def list_partners(current, partner_k, partner_options):
        state = checked_state(current, runs)
        if current is None or state.view != "single":
            raise PreventUpdate
        return render_partners(runs[state.run], state, partner_k, partner_options)

    relay_button_clicks(app, "partnerClick", {"type": ids.PARTNER, "point": ALL}, ids.PARTNER_CLICK)
