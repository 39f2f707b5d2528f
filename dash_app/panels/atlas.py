"""The single-head view's head-atlas panel: the head's strongest label, every label it earns with its evidence, key
statistics and top exemplars.

Everything is Dash components with plain-text children (React escapes them): token and sentence
text is never rendered as HTML. Each exemplar is a button whose pattern-matching id carries the
head, the sentence and the query token, so a click opens the sentence view on it
(``exemplarClick`` in ``assets/clientside.js`` relays the click to the state callback, :func:`register`).
"""

from __future__ import annotations

import re

import dash
import pandas as pd
from dash import ALL, html

from dash_app import ids
from dash_app.data.atlas_columns import PANEL, column_name, format_value, signed_format
from dash_app.state.events import exemplar_target, relay_button_clicks
from dash_app.data.run_data import RunData, RunShape
from dash_app.state.view_state import ViewState, open_exemplar
from qkviz.analysis import excerpt_pieces
from qkviz.analysis.labels import LABEL_COLOURS

#: exemplars listed per head (the atlas keeps more)
EXEMPLARS_SHOWN = 3
#: the first token's share of a head's attention from which the pairs' line gives it (what the pairs leave out)
FIRST_TOKEN_NOTED = 0.5


def missing_atlas_message(data: RunData) -> str:
    return f"No head atlas for this run yet: make it with 'qkviz stats --run {data.run.path}'."


def panel_columns(columns, causal: bool) -> list[str]:
    """The :data:`PANEL` statistics the table has, logit-term shares after the attention shares;
    a decoder's next-token share (always 0) is left out, and an image run's fixed sequence offset."""
    shares = [column for column in columns if column.startswith("share_")]
    image = "argmax_neighbour" in columns     # an image run: a fixed sequence offset says nothing of the grid
    chosen = []
    for column in PANEL:
        if column in columns and not (causal and column == "argmax_next") and not (image and column == "argmax_offset"):
            chosen.append(column)
        if column == "special_attention":
            chosen += shares
    return chosen


#: the shares of queries whose strongest key is of one kind; the largest decides a head's label
DECIDING_SHARES = ("argmax_previous", "argmax_next", "argmax_self", "argmax_offset", "argmax_first", "argmax_delimiter",
                   "argmax_neighbour", "argmax_same_row", "argmax_same_col")


def label_detail(row: pd.Series) -> str:
    """The atlas's note of what decided the label, its share written as the statistics below it are
    (``"99.9% of queries"``, never ``"100%"`` beside a ``"99.9%"``; atlases made before kept whole percents)."""
    detail = str(row["label_detail"])
    image = "argmax_neighbour" in row.index     # an image run's labels do not weigh sequence offsets
    shares = [float(row[column]) for column in DECIDING_SHARES
              if column in row.index and not (image and column == "argmax_offset")]
    if not shares:
        return detail
    return re.sub(r"\d+(\.\d+)?%", lambda _: format_value("argmax_first", max(shares)), detail, count=1)


def label_line(row: pd.Series) -> html.Div:
    """The strongest label as a coloured tag, then the figure that decided it (``"95.4% of queries"``)."""
    colour = LABEL_COLOURS.get(str(row["label"]), "#777")
    return html.Div(className="atlas-label", children=[
        "strongest label: ", html.Span(str(row["label"]), className="label-tag", style={"background": colour}),
        " ", label_detail(row)])


def earned_labels(labels: pd.DataFrame) -> html.Div | None:
    """Every label the head earns, strongest first: its tag, what was measured, its score beside chance and the
    threshold, the probe and the queries it rests on (:mod:`qkviz.analysis.labels.label_table`)."""
    if labels is None or not len(labels):
        return None
    lines = []
    for row in labels.itertuples(index=False):
        tag = html.Span(str(row.label), className="label-tag",
                        style={"background": LABEL_COLOURS.get(str(row.label), "#777")})
        lines.append(html.Li([tag, f" {row.detail}: {signed_format(row.score, '.3g')} (chance "
                                   f"{signed_format(row.chance, '.2g')}, threshold {signed_format(row.threshold, '.2g')}; "
                                   f"{row.probe}; {int(row.queries):,} queries)"]))
    return html.Div([html.Div(f"Labels earned ({len(lines)}):", className="hint"),
                     html.Ul(lines, className="atlas-labels")])


def statistics_table(row: pd.Series, columns: list[str]) -> html.Table:
    """One line per statistic: its name, its value (a fixed-offset share names the offset)."""
    lines = []
    image = "argmax_neighbour" in row     # an image run's statistics are on the patch grid
    for column in columns:
        name = column_name(column, image)
        if column == "argmax_offset" and "offset" in row and row[column] > 0:   # no offset won: nothing to name
            name += f" ({format_value('offset', row['offset'])})"
        lines.append(html.Tr([html.Td(name), html.Td(format_value(column, float(row[column])))]))
    return html.Table(html.Tbody(lines), className="atlas-stats")


def pairs_hint(row: pd.Series) -> str:
    """The line above the strongest pairs: what they leave out (the atlas's exemplars never pair a query with the
    first token or a special token, nor a special token's query: ``head_stats._exemplar_candidates``), and the first
    token's share of the head's attention when it takes half or more of it (a first-token head's pairs are then
    what is left)."""
    text = "Strongest pairs, leaving out the first token and special tokens"
    first = row.get("first_token_attention")
    if first is not None and not pd.isna(first) and float(first) >= FIRST_TOKEN_NOTED:
        text += (f" (the first token takes {format_value('first_token_attention', float(first))} of this head's "
                 "attention; these pairs are among the rest)")
    return text + ". Click one to open its sentence:"


def exemplar_button(data: RunData, exemplar) -> html.Button:
    """One exemplar: ``query → key (weight)`` over its sentence, the pair marked; a click opens the sentence."""
    sentence, query, key = int(exemplar.sentence), int(exemplar.query), int(exemplar.key)
    first = int(data.sentences.first_token.iat[sentence])
    target = {"type": ids.EXEMPLAR, "layer": int(exemplar.layer), "head": int(exemplar.head),
              "sentence": sentence, "point": first + query}
    return html.Button(id=target, n_clicks=0, className="exemplar", title="open this sentence", children=[
        html.Div([html.B(str(exemplar.query_token)), " → ", html.B(str(exemplar.key_token)),
                  f"  ({float(exemplar.weight):.2f})"]),
        html.Div(marked_sentence(data, sentence, first + query, first + key), className="excerpt"),
    ])


def marked_sentence(data: RunData, sentence: int, query: int, key: int) -> list:
    """The sentence's text as plain-text pieces, the query token's and key token's characters in
    ``html.Mark`` (tokens without characters, such as special tokens, are not marked)."""
    return marked_tokens(data, sentence, [(query, "q"), (key, "k")])


def marked_tokens(data: RunData, sentence: int, marks: list[tuple[int, str]]) -> list:
    """The sentence's text as plain-text pieces, each ``(token, class)`` of ``marks`` in an ``html.Mark`` of
    that class (a token without characters, or overlapping an earlier mark, is not marked); of a long document,
    only the text around the marks (:func:`qkviz.analysis.excerpt_pieces`)."""
    text = str(data.sentences.text.iat[sentence])
    spans = [(int(data.tokens.char_start.iat[token]), int(data.tokens.char_end.iat[token]), kind)
             for token, kind in marks]
    return [piece if kind is None else html.Mark(piece, className=kind) for piece, kind in excerpt_pieces(text, spans)]


def head_panel(data: RunData, layer: int, head: int) -> list:
    """The panel's children for one head, or the one line naming ``qkviz stats`` without an atlas."""
    atlas = data.atlas()
    row = data.atlas_row(layer, head)
    if atlas is None or row is None:
        return [html.Div(missing_atlas_message(data) if atlas is None else "The head atlas has no row for this head.")]
    exemplars = atlas.exemplars[(atlas.exemplars["layer"] == layer) & (atlas.exemplars["head"] == head)]
    exemplars = exemplars.sort_values("rank").head(EXEMPLARS_SHOWN)
    children = [label_line(row)]
    earned = earned_labels(atlas.labels_of(layer, head))
    if earned is not None:
        children.append(earned)
    children.append(statistics_table(row, panel_columns(list(atlas.table.columns), data.run.is_causal)))
    if len(exemplars):
        children.append(html.Div(pairs_hint(row), className="hint pairs-hint"))
        children += [exemplar_button(data, exemplar) for exemplar in exemplars.itertuples()]
    return children


def open_clicked_exemplar(state: ViewState, event: dict | None, data: RunData, shape: RunShape) -> ViewState:
    """A click on an exemplar (``{layer, head, sentence, point, timestamp}``) opens the sentence view on it, its
    query clicked, when the point is in that sentence."""
    target = exemplar_target(event)
    if not target:
        return state
    layer, head, sentence, point = target
    if 0 <= sentence < shape.n_sentences and point in data.sentence_rows(sentence):
        return open_exemplar(state, layer, head, sentence, point, shape)
    return state


def register(app: dash.Dash) -> None:
    """Relay an exemplar button's click to the state callback: ``{layer, head, sentence, point, timestamp}``."""
    exemplars = {"type": ids.EXEMPLAR, "layer": ALL, "head": ALL, "sentence": ALL, "point": ALL}
    relay_button_clicks(app, "exemplarClick", exemplars, ids.EXEMPLAR_CLICK)
