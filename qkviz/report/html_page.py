"""Self-contained report pages: one stylesheet, plotly.js inlined once, figures as ``<div>``s.

Shared by ``index.html`` (:mod:`qkviz.report.report_html`) and ``atlas.html`` (:mod:`qkviz.report.atlas_html`);
nothing on a page is fetched from the network.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; vertical-align: top; }
th:first-child, td:first-child { text-align: left; }
.note { color: #555; max-width: 60em; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 0.5em; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""


def page(title: str, sections: list[str], extra_style: str = "") -> str:
    """A whole HTML page: ``title`` (escaped here) and ``sections`` (already HTML)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}{extra_style}</style>"
            f"<script>{get_plotlyjs()}</script></head><body>" + "\n".join(sections) + "</body></html>\n")


def figure_html(figure: go.Figure) -> str:
    """A figure as a ``<div>`` for a :func:`page` (plotly.js comes with the page)."""
    return figure.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})
