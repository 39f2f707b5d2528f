"""Report pages: one stylesheet, one shared copy of plotly.js beside the pages, figures as ``<div>``s.

Shared by ``index.html`` (:mod:`qkviz.report.report_html`) and ``atlas.html`` (:mod:`qkviz.report.atlas_html`).
plotly.js is written once into the report directory (:data:`PLOTLY_ASSET`, see :func:`shared_assets`) and
each page loads it with a relative ``<script src>``, so the pages open from ``file://`` with no network. The
pages draw only cartesian traces (heatmaps, scatters, boxes), so where plotly's cartesian bundle is installed
(1.5 MB, npm's ``plotly.js-cartesian-dist-min`` of the same version as the ``plotly`` package's plotly.js;
``scripts/setup.sh`` puts it in ``<venv>/share/qkviz/``, or name it in ``$QKVIZ_PLOTLY_JS``) that is the one
written: it opens in half the time of the full 4.8 MB bundle from the ``plotly`` package, used otherwise.
A page holds its figures' data only, thinned: every float array is a float32 typed array (base64, not a JSON
list), and the Plotly template is written once per page instead of once per figure. Tables are HTML, with
their figures as computed.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import os
import sys
import uuid
from functools import cache
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.io.json import to_json_plotly
from plotly.offline import get_plotlyjs, get_plotlyjs_version

logger = logging.getLogger(__name__)

#: the report directory's folder of files shared by its pages
ASSETS_DIR = "assets"
#: plotly's cartesian bundle, where ``scripts/setup.sh`` installs it
CARTESIAN_BUNDLE = Path(sys.prefix) / "share" / "qkviz" / f"plotly-cartesian-{get_plotlyjs_version()}.min.js"


@cache
def cartesian_bundle() -> Path | None:
    """The installed cartesian plotly.js bundle of the ``plotly`` package's plotly.js version, or None."""
    path = Path(os.environ.get("QKVIZ_PLOTLY_JS") or CARTESIAN_BUNDLE)
    if not path.is_file():
        return None
    with path.open(encoding="utf-8", errors="replace") as file:
        header = file.read(200)
    if f"(cartesian - minified) v{get_plotlyjs_version()}" not in header:
        logger.warning("%s is not plotly.js's cartesian bundle v%s; the report pages load the full plotly.js",
                       path, get_plotlyjs_version())
        return None
    return path


#: the plotly.js the pages load, by its path relative to the report directory
PLOTLY_ASSET = (f"{ASSETS_DIR}/plotly-cartesian-{get_plotlyjs_version()}.min.js" if cartesian_bundle() is not None
                else f"{ASSETS_DIR}/plotly-{get_plotlyjs_version()}.min.js")
#: the config every figure of a page is drawn with
CONFIG = {"displaylogo": False, "responsive": True}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; vertical-align: top; }
th:first-child, td:first-child { text-align: left; }
.note { color: #555; max-width: 60em; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""
#: after plotly.js: the page's template and config, and ``qkvizPlot`` that draws a figure with them
PLOT_FUNCTION = """
function qkvizPlot(id, data, layout) {
  if (!document.getElementById(id)) return;
  Plotly.newPlot(id, data, Object.assign({template: QKVIZ_TEMPLATE}, layout), QKVIZ_CONFIG);
}
"""


def shared_assets() -> dict[str, bytes]:
    """The files the pages load, by path relative to the report directory: plotly.js, once."""
    bundle = cartesian_bundle()
    return {PLOTLY_ASSET: bundle.read_bytes() if bundle is not None else get_plotlyjs().encode("utf-8")}


def page(title: str, sections: list[str], extra_style: str = "") -> str:
    """A whole HTML page: ``title`` (escaped here) and ``sections`` (already HTML; figures from :func:`figure_html`)."""
    template = to_json_plotly(_default_template())
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}{extra_style}</style>"
            f'<script src="{PLOTLY_ASSET}"></script>'
            f"<script>const QKVIZ_TEMPLATE = {template};\nconst QKVIZ_CONFIG = {json.dumps(CONFIG)};{PLOT_FUNCTION}"
            "</script></head><body>" + "\n".join(sections) + "</body></html>\n")


def figure_html(figure: go.Figure) -> str:
    """A figure as a ``<div>`` and the call that draws it, for a :func:`page`: its data thinned (float64
    arrays as float32 typed arrays) and its layout without the page's template."""
    content = figure.to_dict()
    layout = content["layout"]
    if layout.get("template") == _default_template():
        del layout["template"]
    data = thin(content["data"])
    height = layout.get("height")
    style = f"height:{int(height)}px; width:100%;" if height else "height:100%; width:100%;"
    name = str(uuid.uuid4())
    return (f'<div><div id="{name}" class="plotly-graph-div" style="{style}"></div><script>'
            f'qkvizPlot("{name}", {to_json_plotly(data)}, {to_json_plotly(thin(layout))});</script></div>')


def thin(content):
    """``content`` (a figure's data or layout, as :meth:`plotly.graph_objects.Figure.to_dict` gives it) with
    every float64 typed array as float32; a new object, ``content`` is left as it was."""
    if isinstance(content, dict):
        if content.get("dtype") == "f8" and "bdata" in content:
            values = np.frombuffer(base64.b64decode(content["bdata"]), dtype=np.float64).astype(np.float32)
            return {**content, "dtype": "f4", "bdata": base64.b64encode(values.tobytes()).decode("ascii")}
        return {key: thin(value) for key, value in content.items()}
    if isinstance(content, list | tuple):
        return [thin(value) for value in content]
    return content


def _default_template() -> dict:
    """The layout template a figure gets when it names none (Plotly's default), as ``to_dict`` writes it."""
    return go.Figure().to_dict()["layout"].get("template", {})
