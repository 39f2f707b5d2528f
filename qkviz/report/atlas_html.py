"""The report's head-atlas page ``atlas.html``: like ``index.html``, it loads the report's shared plotly.js.

Label grid, a layer x head heatmap per statistic, the average attention by relative position of
every head (heads grouped by layer), and each head's strongest exemplar with its pair marked.
Token and sentence text is HTML-escaped.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from qkviz.report.html_page import figure_html, page
from qkviz.analysis.atlas.head_atlas import UPDATE_BINS, UPDATE_RATIO_RANGE, HeadAtlas
from qkviz.analysis.labels.registry import HEAD_LABEL, LABEL_COLOURS, LABELS
from qkviz.analysis.documents.text_excerpt import excerpt
from qkviz.analysis.statistics.registry import ATLAS_STATISTICS, IMAGE_RUNS
from qkviz.report.figure_grid import heatmap_grid
from qkviz.report.position_heatmap import head_names, log_weights, relative_position_figure
from qkviz.analysis.statistics.syntax import POS_TAGS

ATLAS_STYLE = ("mark.q { background: #c6dbef; } mark.k { background: #fdd0a2; } table { font-size: 0.9em; }\n"
               ".swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: middle; }\n"
               "summary { cursor: pointer; margin: 4px 0; }\n")


def render_atlas_html(atlas: HeadAtlas, model: str, run_path: str) -> str:
    table = atlas.table
    counts = table.label.value_counts()
    shown = [statistic.name for statistic in ATLAS_STATISTICS       # the image runs' grid shares are not drawn
             if statistic.runs != IMAGE_RUNS and statistic.name in table]
    count_text = ", ".join(f"{html.escape(label)} {counts.get(label, 0)}" for label in LABELS if counts.get(label, 0))
    sections = [
        f"<h1>Head atlas: {html.escape(model)}</h1>",
        f'<p class="note">Run <code>{html.escape(run_path)}</code>; attention recomputed from the stored vectors '
        f"over the whole corpus. Strongest labels (thresholds: {html.escape(str(atlas.thresholds.as_dict()))}): "
        f"{count_text}. <a href=\"index.html\">Correlation report</a>.</p>",
        "<h2>Strongest label of each head</h2>" + _label_grid(atlas),
        _earned_section(atlas),
        "<h2>Average attention by relative position</h2>"
        '<p class="note">Mean weight at key position &minus; query position, per head; colour on a log scale.</p>'
        + figure_html(relative_position_figure(atlas.relative_position, atlas.offsets)),
        "<h2>Statistics, layer &times; head</h2>" + _statistics_grid(atlas, shown),
        _syntax_section(atlas),
        _decomposition_section(atlas),
        _update_section(atlas),
        "<h2>Exemplars: the strongest pair of each head</h2>" + _exemplar_table(atlas),
    ]
    return page(f"qkviz head atlas: {model}", sections, ATLAS_STYLE)


def _grid(table: pd.DataFrame, column: str) -> np.ndarray:
    grid = np.full((table.layer.max() + 1, table["head"].max() + 1), np.nan)
    grid[table.layer.to_numpy(), table["head"].to_numpy()] = table[column].to_numpy(dtype=float)
    return grid


#: the label grid writes each head's label in its cell up to this many heads a layer (past it the cells are too
#: narrow for a word: the colour and the key above say it, hover names it)
LABELLED_CELLS_HEADS = 16


def _label_grid(atlas: HeadAtlas) -> str:
    """The heads' labels as a layer x head grid of colours, with a key of the labels used and their counts."""
    table = atlas.table
    codes = {label: number for number, label in enumerate(LABELS)}
    table = table.assign(code=table.label.map(codes))
    grid = _grid(table, "code")
    text = np.full(grid.shape, "", dtype=object)
    text[table.layer.to_numpy(), table["head"].to_numpy()] = table.label.to_numpy()
    every = np.full(grid.shape, "", dtype=object)
    for (layer, head), rows in atlas.labels.groupby(["layer", "head"]):
        every[int(layer), int(head)] = html.escape(", ".join(dict.fromkeys(rows.label)))
    steps = len(LABELS)
    colourscale = []
    for number, label in enumerate(LABELS):
        colourscale += [[number / steps, LABEL_COLOURS[label]], [(number + 1) / steps, LABEL_COLOURS[label]]]
    in_cells = grid.shape[1] <= LABELLED_CELLS_HEADS
    figure = go.Figure(go.Heatmap(z=grid, zmin=-0.5, zmax=steps - 0.5, colorscale=colourscale, text=text,
                                  texttemplate="%{text}" if in_cells else None, textfont={"size": 9},
                                  showscale=False, xgap=1 if not in_cells else 0, ygap=1 if not in_cells else 0,
                                  x=[f"H{h}" for h in range(grid.shape[1])], y=[f"L{l}" for l in range(grid.shape[0])],
                                  customdata=every,
                                  hovertemplate="%{y} %{x}: %{text}<br>earns: %{customdata}<extra></extra>"))
    figure.update_yaxes(autorange="reversed")
    figure.update_xaxes(tickangle=0)
    figure.update_layout(height=120 + (28 if in_cells else 18) * grid.shape[0],
                         margin={"l": 40, "r": 10, "t": 20, "b": 30})
    counts = table.label.value_counts()
    key = "".join(f'<span class="swatch" style="background:{LABEL_COLOURS[label]}"></span>'
                  f"{html.escape(label)} {counts[label]:,} &nbsp; " for label in LABELS if counts.get(label, 0))
    return f'<p class="note">{key}</p>' + figure_html(figure)


#: heads listed per label on the page (strongest first; the label table has them all)
HEADS_PER_LABEL = 12


def _earned_section(atlas: HeadAtlas) -> str:
    """Every label the heads earn: how many heads earn it, and its strongest heads with score, chance and probe."""
    labels = atlas.labels
    if not len(labels):
        return ""
    rows = []
    for label in [label for label in LABELS if label in set(labels.label)]:
        earned = labels[labels.label == label].sort_values("score", ascending=False)
        heads = earned.drop_duplicates(["layer", "head"])
        listed = ", ".join(f"L{int(row.layer)} H{int(row.head)} {row.score:.2f}"
                           + (f" ({html.escape(str(row.detail))})" if HEAD_LABEL[label].named_detail else "")
                           for row in heads.head(HEADS_PER_LABEL).itertuples())
        more = f", and {len(heads) - HEADS_PER_LABEL:,} more" if len(heads) > HEADS_PER_LABEL else ""
        first = earned.iloc[0]
        rests_on = f"{int(earned.queries.min()):,}" + (f"–{int(earned.queries.max()):,}"
                                                       if earned.queries.max() > earned.queries.min() else "")
        rows.append(f'<tr><td><span class="swatch" style="background:{LABEL_COLOURS[label]}"></span>'
                    f"{html.escape(label)}</td><td>{len(heads):,}</td><td>{html.escape(str(first.probe))}; threshold "
                    f"{first.threshold:.2g}, chance about {earned.chance.median():.2g}</td><td>{rests_on}</td>"
                    f"<td>{listed}{more}</td></tr>")
    return ("<h2>Every label each head earns</h2>"
            f'<p class="note">A head earns every label whose score reaches its threshold (qkviz.analysis.labels.label_table); '
            f"run.atlas.labels has each with its evidence. Probe: {html.escape(atlas.probe_note or 'not run')}. "
            f"Copying and suppression (what heads write): {html.escape(atlas.writes_note or 'not run')}.</p>"
            "<table><thead><tr><th>label</th><th>heads</th><th>measured on</th><th>queries each rests on</th>"
            "<th>strongest heads (score)</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table>")


def _syntax_section(atlas: HeadAtlas) -> str:
    tags = [tag for tag in POS_TAGS if f"pos_{tag}" in atlas.table]
    if not tags:
        return ('<p class="note">No syntax statistics: <code>qkviz stats --syntax</code> adds attention by part of '
                "speech and dependency alignment.</p>")
    table = atlas.table
    names = [f"L{l} H{h}" for l, h in zip(table.layer, table["head"])]
    figure = go.Figure(go.Heatmap(z=table[[f"pos_{tag}" for tag in tags]].to_numpy(), x=tags, y=names,
                                  colorscale="Viridis", hovertemplate="%{y} to %{x}: %{z:.3f}<extra></extra>"))
    figure.update_yaxes(autorange="reversed", showticklabels=len(names) <= 120)
    figure.update_layout(height=min(200 + 8 * len(names), 2400), margin={"l": 70, "r": 10, "t": 20, "b": 40})
    return "<h2>Share of attention by the key's part of speech</h2>" + figure_html(figure)


def _decomposition_section(atlas: HeadAtlas) -> str:
    if atlas.term_profiles is None or len(atlas.terms) < 2:
        return ('<p class="note">No logit decomposition: the run holds no query / key biases or rotary tables '
                "(runs extracted before they were captured: extract again with --overwrite).</p>")
    shares = _statistics_grid(atlas, [f"share_{term}" for term in atlas.terms])
    n_layers, n_heads = atlas.term_profiles.shape[:2]
    profiles = _term_profiles(atlas.term_profiles.reshape(n_layers * n_heads, len(atlas.terms), -1),
                              head_names(n_layers, n_heads), atlas.terms, atlas.offsets)
    return ("<h2>Logit decomposition</h2>"
            '<p class="note">Each term\'s share of the logit\'s variation across a query\'s keys (shares add up to 1; '
            "a term constant for a query gets 0), and the attention the term alone would pay by relative position "
            "(log scale).</p>"
            f"{shares}{profiles}" + _embedding_section(atlas))


def _embedding_section(atlas: HeadAtlas) -> str:
    """The first layer's token / position split (absolute-position models)."""
    if atlas.embedding_profiles is None:
        return ""
    first = atlas.table[atlas.table.layer == 0]
    terms = [column.removeprefix("embed_share_") for column in first if column.startswith("embed_share_")]
    names = [f"L0 H{head}" for head in first["head"]]
    shares = go.Figure(go.Heatmap(z=first[[f"embed_share_{term}" for term in terms]].to_numpy(), x=terms, y=names,
                                  colorscale="Viridis", hovertemplate="%{y} %{x}: %{z:.3f}<extra></extra>"))
    shares.update_yaxes(autorange="reversed")
    shares.update_layout(title="share of the logit's variation", height=140 + 22 * len(names),
                         margin={"l": 60, "r": 10, "t": 40, "b": 30})
    return ("<h3>First layer: token and position parts</h3>"
            '<p class="note">The first layer\'s input is the normalised sum of token and position embeddings, so each '
            "logit splits exactly into token&middot;token, token&middot;position, position&middot;token, "
            "position&middot;position and the rest (token type, norm bias, biases).</p>"
            f"{figure_html(shares)}{_term_profiles(atlas.embedding_profiles, names, terms, atlas.offsets)}")


def _term_profiles(profiles: np.ndarray, names: list[str], terms, offsets: np.ndarray) -> str:
    """One heatmap per term of ``profiles`` ``[row, term, offset]``: the attention of the term alone (one
    figure, one colour scale)."""
    panels = {}
    for number, term in enumerate(terms):
        values, seen = log_weights(profiles[None, :, number], offsets)
        panels[f"{term} alone"] = go.Heatmap(z=values, x=seen, y=names, colorscale="Viridis", zmin=-4, zmax=0,
                                             colorbar={"title": {"text": "log10 weight", "side": "right"}},
                                             hovertemplate="%{y}, offset %{x}: 10^%{z:.2f}<extra></extra>")
    figure = heatmap_grid(panels, columns=3, panel_height=340, shared_scale=True)
    figure.update_yaxes(showticklabels=len(names) <= 24)
    return figure_html(figure)


def _update_section(atlas: HeadAtlas) -> str:
    if atlas.update_histograms is None:
        return ('<p class="note">No head updates: extract the run with <code>--head-update</code> to see each '
                "head's update to the hidden state.</p>")
    n_layers, n_heads = atlas.update_histograms.shape[:2]
    names = [f"L{l} H{h}" for l in range(n_layers) for h in range(n_heads)]
    low, high = UPDATE_RATIO_RANGE
    axes = {0: ("log10 |update| / |hidden state|", np.linspace(low, high, UPDATE_BINS + 1)),
            1: ("cosine(update, hidden state)", np.linspace(-1, 1, UPDATE_BINS + 1))}
    panels = {title: go.Heatmap(z=atlas.update_histograms[:, :, index].reshape(n_layers * n_heads, -1),
                                x=(edges[:-1] + edges[1:]) / 2, y=names, colorscale="Viridis",
                                hovertemplate="%{y} at %{x:.2f}: %{z:.1%} of tokens<extra></extra>")
              for index, (title, edges) in axes.items()}
    figure = heatmap_grid(panels, columns=2, panel_height=min(130 + 8 * len(names), 1530))
    figure.update_yaxes(showticklabels=len(names) <= 120)
    return ("<h2>Each head's update to the hidden state</h2>"
            '<p class="note">Per token: the head\'s output through its slice of the output projection, against the '
            "layer's input (the residual stream): its norm ratio and cosine, as histograms per head.</p>"
            + figure_html(figure))


def _statistics_grid(atlas: HeadAtlas, names: list[str]) -> str:
    """A layer x head heatmap per statistic of ``names``, each on its own scale, as one figure."""
    panels = {}
    for name in names:
        grid = _grid(atlas.table, name)
        panels[name] = go.Heatmap(z=grid, x=[f"H{h}" for h in range(grid.shape[1])],
                                  y=[f"L{l}" for l in range(grid.shape[0])], colorscale="Viridis",
                                  hovertemplate="%{y} %{x}: %{z:.3f}<extra></extra>")
    n_layers = int(atlas.table.layer.max()) + 1
    return figure_html(heatmap_grid(panels, columns=3, panel_height=50 + 22 * n_layers))


#: past this many heads the exemplars are one collapsed table per layer (1,024 rows in one table is a long scroll)
EXEMPLARS_BY_LAYER_HEADS = 144
def _exemplar_table(atlas: HeadAtlas) -> str:
    """Each head's strongest pair and its sentence; past :data:`EXEMPLARS_BY_LAYER_HEADS` heads, a table per layer,
    each folded (``<details>``) under a line naming the layer."""
    best = atlas.exemplars[atlas.exemplars["rank"] == 0]
    labels = atlas.table.set_index(["layer", "head"]).label
    header = "<tr><th>head</th><th>label</th><th>query &rarr; key (weight)</th><th>sentence</th></tr>"

    def rows(chosen: pd.DataFrame) -> str:
        return "".join(
            f"<tr><td>L{row.layer} H{row.head}</td><td>{html.escape(labels.get((row.layer, row.head), ''))}</td>"
            f"<td><mark class=\"q\">{html.escape(str(row.query_token))}</mark> &rarr; "
            f"<mark class=\"k\">{html.escape(str(row.key_token))}</mark> ({row.weight:.2f})</td>"
            f"<td>{html.escape(excerpt(str(row.text), []))}</td></tr>" for row in chosen.itertuples())

    if len(atlas.table) <= EXEMPLARS_BY_LAYER_HEADS:
        return f"<table>{header}{rows(best)}</table>"
    return "".join(f"<details><summary>Layer {layer}: {len(chosen)} heads</summary><table>{header}{rows(chosen)}"
                   "</table></details>" for layer, chosen in best.groupby("layer", sort=True))
