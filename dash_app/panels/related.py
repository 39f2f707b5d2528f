"""The single view's "Related heads" panel: the heads nearest this one by attention and by geometry.

From the run's head similarity (``qkviz related``, :mod:`qkviz.analysis.atlas.head_similarity`): the
:data:`RELATED_SHOWN` heads with the smallest Jensen-Shannon distance between their attention and
this head's on the same queries, and those with the highest linear CKA between the aligned query/key
clouds. Each is a button whose pattern-matching id carries the head, so a click opens it
(``relatedHeadClick`` in ``assets/clientside.js`` relays the click to the state callback, :func:`register`).
Plain-text children only.
"""

from __future__ import annotations

import dash
from dash import ALL, html

from dash_app import ids
from dash_app.state.events import related_target, relay_button_clicks
from dash_app.data.run_data import RunData, RunShape
from dash_app.state.view_state import ViewState, open_head
from qkviz.analysis.labels import LABEL_COLOURS
from qkviz.analysis import RelatedHead, related_heads

RELATED_SHOWN = 5
#: (by, heading, how to read the value)
LISTS = (("attention", "By attention (JS distance, lower is closer)", "{:.3f}"),
         ("geometry", "By query/key geometry (CKA, higher is closer)", "{:.3f}"))


def missing_related_message(data: RunData) -> str:
    return f"No head similarity for this run yet: make it with 'qkviz related --run {data.run.path}'."


def head_button(data: RunData, related: RelatedHead, by: str, value_format: str) -> html.Button:
    """``L2 H7  [label]  0.123``; a click opens that head."""
    row = data.atlas_row(related.layer, related.head)
    label = [] if row is None else [html.Span(str(row["label"]), className="label-tag",
                                              style={"background": LABEL_COLOURS.get(str(row["label"]), "#777")})]
    target = {"type": ids.RELATED_HEAD, "layer": related.layer, "head": related.head, "by": by}
    return html.Button(id=target, n_clicks=0, title="open this head", className="related-head", children=[
        html.B(f"L{related.layer} H{related.head}"), *label, html.Span(value_format.format(related.value))])


def render_related(data: RunData, layer: int, head: int) -> list:
    """The panel's children for one head, or the one line naming ``qkviz related`` without a similarity."""
    similarity = data.related()
    if similarity is None:
        return [html.Div(missing_related_message(data))]
    children = []
    for by, heading, value_format in LISTS:
        children.append(html.Div(heading, className="hint"))
        children += [head_button(data, related, by, value_format)
                     for related in related_heads(similarity, layer, head, RELATED_SHOWN, by)]
    children.append(html.Div(f"Over {similarity.n_queries:,} queries in {len(similarity.sentences):,} sentences.",
                             className="hint"))
    return children


def open_clicked_related(state: ViewState, event: dict | None, _data: RunData, shape: RunShape) -> ViewState:
    """A click on a related head (``{layer, head, timestamp}``) opens it, when it is one of the run's heads."""
    target = related_target(event)
    if not target:
        return state
    layer, head = target
    if 0 <= layer < shape.n_layers and 0 <= head < shape.n_heads:
        return open_head(state, layer * shape.n_heads + head, shape)
    return state


def register(app: dash.Dash) -> None:
    """Relay a related-head button's click to the state callback: ``{layer, head, timestamp}``."""
    buttons = {"type": ids.RELATED_HEAD, "layer": ALL, "head": ALL, "by": ALL}
    relay_button_clicks(app, "relatedHeadClick", buttons, ids.RELATED_CLICK)
