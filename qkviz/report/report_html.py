"""The report's ``index.html``: one page, with the report's shared plotly.js beside it (no network).

Figures are built from the report's table and summary only; every piece of text that comes
from the run (model name, paths) is HTML-escaped.
"""

from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from qkviz.report.figure_grid import heatmap_grid
from qkviz.report.html_page import figure_html, page
from qkviz.neighbours.trust import RECALL_GOAL, TRUST_GOAL
from qkviz.report.correlation_summary import ATTENTIONVIZ_MEANS, Report, goal_lines

#: the distance / dot-product pairs of the best and worst head are drawn as a density of this many bins a side
#: (a 2D histogram draws in a tenth of the time of thousands of SVG points, and shows where they pile up)
PAIR_BINS = 50
#: empty cells transparent, one pair already a visible tint, the most pairs dark blue
PAIR_DENSITY = [[0.0, "rgba(255,255,255,0)"], [1e-6, "#c6dbef"], [0.5, "#4292c6"], [1.0, "#08306b"]]


def render_html(report: Report) -> str:
    summary, table = report.summary, report.table
    sections = [
        _header(summary),
        _means_section(summary),
        _projection_section(summary),
        "<h2>Per head: Pearson correlation, layer &times; head</h2>"
        '<p class="note">Blue: near means a high dot product (the picture is faithful); red: the opposite.</p>'
        + figure_html(heatmap_grid({space: _heatmap(table, space) for space in summary["spaces"]}, columns=3,
                                   panel_height=50 + 22 * summary["n_layers"], shared_scale=True)),
        "<h2>Distribution of per-head correlations</h2>" + figure_html(_distribution(table)),
        "<h2>Mean by layer</h2>" + figure_html(_layer_means(summary)),
        _extremes_section(report),
    ]
    return page(f"qkviz report: {summary['model']}", sections)


def _header(summary: dict) -> str:
    pairs = summary["pairs"]
    how = ("every attending pair (exact)" if pairs["exact"]
           else html.escape(pairs["sampling"]))
    missing = summary.get("missing_projections")
    missing_note = (f'<p class="note"><b>No projections are cached yet</b>, so only the head spaces are covered: '
                    f"<code>{html.escape(missing)}</code> adds them; then make the report again.</p>"
                    if missing else "")
    atlas_note = (f'<p class="note"><a href="{summary["head_atlas"]["page"]}">Head atlas</a>: statistics, labels '
                  "and exemplars of every head.</p>" if "head_atlas" in summary else
                  f'<p class="note">No head atlas yet: <code>{html.escape(summary["missing_atlas"])}</code> makes '
                  "one; then make the report again.</p>")
    return (f"<h1>Distance vs dot product: {html.escape(summary['model'])}</h1>"
            f'<p class="note">Run <code>{html.escape(summary["run"])}</code>: {summary["n_layers"]} layers &times; '
            f'{summary["n_heads"]} heads, {summary["n_tokens"]:,} tokens in {summary["n_sentences"]:,} sentences; '
            f'{"causal" if summary["causal"] else "bidirectional"} attention. Pairs: '
            f'{html.escape(pairs["rule"])}; {pairs["used_per_head"]:,} per head, {how}. '
            f'Dot product: {html.escape(summary["dot_product"])}. <i>query Spearman</i> is the Spearman '
            "correlation among each query's own keys, averaged over queries: the softmax compares only "
            "those.</p>" + missing_note + atlas_note)


def _means_section(summary: dict) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(space)}</td>" + "".join(_cell(means[name]) for name in ("pearson", "spearman",
                                                                                      "query_spearman"))
        + "".join(_cell(means.get(name), "{:.1%}") for name in ("recall_query", "recall_key"))
        + _cell(means.get("trust"), "{:.3f}")
        + "</tr>" for space, means in summary["model_means"].items())
    published = ", ".join(f"{name} {value:+.3f}" for name, value in ATTENTIONVIZ_MEANS.items())
    return ("<h2>Model means over heads</h2><table><tr><th>space</th><th>Pearson</th><th>Spearman</th>"
            f"<th>query Spearman</th><th>recall q&rarr;k</th><th>recall k&rarr;q</th><th>trust</th></tr>{rows}</table>"
            '<p class="note"><i>recall</i>: partner recall@10, of a query\'s 10 strongest keys over the whole corpus '
            "the share among its 10 nearest keys in that space (and from the keys' side), over 200 sampled "
            "queries and keys; 10 / tokens by chance. It says whether the picture shows each token's actual "
            "partners. <i>trust</i>: a layout's trustworthiness at k = 10 against the translated+scaled points it "
            "lays out, on 1,000 sampled queries and keys: 1 when each point's 10 nearest in the layout are among "
            "its 10 nearest in that space (&ndash; for the head spaces, which are not layouts).</p>"
            + _goals_note(summary)
            + f'<p class="note">AttentionViz (Yeh et al., 2023) reports mean correlations of {published} on '
            "Wiki-Auto data, for their own normalised joint embeddings; compare with the translated+scaled row.</p>")


def _goals_note(summary: dict) -> str:
    """The goals a layout should reach on every head, and how many heads reach both in each projection."""
    lines = goal_lines(summary)
    if not lines:
        return ""
    return (f'<p class="note goals">The goals on every head: partner recall@10 (mean of both sides) &ge; '
            f"{RECALL_GOAL:.0%} and trustworthiness &ge; {TRUST_GOAL:.2f}. "
            + "; ".join(html.escape(line) for line in lines) + ".</p>")


def _projection_section(summary: dict) -> str:
    ranking = summary["projections"]
    if not ranking:
        return ""
    rows = "".join(f"<tr><td>{html.escape(row['space'])}</td>{_cell(row['pearson'])}{_cell(row['spearman'])}"
                   f"{_cell(row['query_spearman'])}{_cell(row['kept'], '{:.0%}')}</tr>" for row in ranking)
    return ("<h2>Which projection keeps attention structure best</h2>"
            f'<p class="note">Best: <b>{html.escape(ranking[0]["space"])}</b>. <i>kept</i> is the projection\'s '
            "mean Pearson over that of the translated+scaled space it was made from.</p>"
            "<table><tr><th>projection</th><th>Pearson</th><th>Spearman</th><th>query Spearman</th><th>kept</th>"
            f"</tr>{rows}</table>")


def _extremes_section(report: Report) -> str:
    """The sampled pairs of the best and the worst head, one row each, in one figure (one WebGL context)."""
    if not report.extremes:
        return ""
    best_projection = [row["space"] for row in report.summary["projections"]][:1]
    spaces = ["translated+scaled"] + [space for space in best_projection
                                      if all(space in kept.figures for kept in report.extremes.values())]
    titles = [f"{name} head L{kept.layer} H{kept.head}: {space}" for name, kept in report.extremes.items()
              for space in spaces]
    figure = make_subplots(rows=len(report.extremes), cols=len(spaces), subplot_titles=titles,
                           vertical_spacing=0.12)
    for row, kept in enumerate(report.extremes.values(), start=1):
        for column, space in enumerate(spaces, start=1):
            distances, dots = kept.figures[space]
            figure.add_trace(go.Histogram2d(x=dots, y=distances, nbinsx=PAIR_BINS, nbinsy=PAIR_BINS, name=space,
                                            colorscale=PAIR_DENSITY, showscale=False,
                                            hovertemplate="dot %{x}, distance %{y}: %{z} pairs<extra></extra>"),
                             row=row, col=column)
            figure.update_xaxes(title_text="dot product", row=row, col=column)
            figure.update_yaxes(title_text="distance", row=row, col=column)
    figure.update_layout(height=360 * len(report.extremes))
    notes = "".join(_shown_pairs(name, report.summary.get("extreme_pairs", {}).get(name),
                                 report.summary["pairs"]["seed"]) for name in report.extremes)
    return "<h2>Distance vs dot product, best and worst head</h2>" + notes + figure_html(figure)


def _shown_pairs(name: str, counts: dict | None, seed: int) -> str:
    """How many of the ``name`` head's attending pairs its density shows, and how they were chosen."""
    if counts is None:
        return ""
    how = ("every attending pair" if counts["shown"] == counts["attending"] else
           f"{counts['shown']:,} of the {counts['attending']:,} attending pairs of layer {counts['layer']}, "
           f"drawn uniformly at random (with replacement, seed {seed})")
    return (f'<p class="note">{name} head, L{counts["layer"]} H{counts["head"]}: {how}; the darker a cell, the more '
            "pairs in it.</p>")


def _heatmap(table: pd.DataFrame, space: str) -> go.Heatmap:
    rows = table[table.space == space]
    grid = rows.pivot(index="layer", columns="head", values="pearson")
    return go.Heatmap(z=grid.to_numpy(), x=[f"H{h}" for h in grid.columns], y=[f"L{l}" for l in grid.index],
                      zmin=-1, zmax=1, colorscale="RdBu_r", hovertemplate="%{y} %{x}: Pearson %{z:.3f}<extra></extra>")


def _distribution(table: pd.DataFrame) -> go.Figure:
    figure = go.Figure()
    for space, rows in table.groupby("space", sort=False):
        figure.add_trace(go.Box(y=rows.pearson, name=space, boxpoints="all", jitter=0.4, pointpos=0,
                                customdata=rows[["layer", "head"]].to_numpy(np.int16),
                                hovertemplate="L%{customdata[0]} H%{customdata[1]}: %{y:.3f}<extra></extra>"))
    figure.update_layout(yaxis_title="Pearson (distance, dot product)", showlegend=False, height=420)
    return figure


def _layer_means(summary: dict) -> go.Figure:
    figure = go.Figure()
    for space, layers in summary["layer_means"].items():
        figure.add_trace(go.Scatter(x=[int(layer) for layer in layers], y=[row["pearson"] for row in layers.values()],
                                    mode="lines+markers", name=space))
    figure.update_layout(xaxis_title="layer", yaxis_title="mean Pearson (distance, dot product)", height=380)
    return figure


def _cell(value, form: str = "{:+.3f}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "<td>&ndash;</td>"
    return f"<td>{form.format(value)}</td>"

