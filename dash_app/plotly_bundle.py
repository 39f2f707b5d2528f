"""Which plotly.js the app's page loads: a build holding only the trace types the app draws, where set-up made one.

``dcc.Graph`` loads the plotly.js the ``plotly`` package ships (every trace type: 4.8 MB minified at plotly.js 4.1.1)
when the first graph mounts, unless the page already has a ``window.Plotly``. Evaluating that bundle was the largest
single cost of a first visit: about 0.4 s of the browser's one thread on the 2-core machine, of a cold load of the
composition view of about 2 s. So ``scripts/setup.sh`` builds plotly.js of the same version with only the trace types
of :data:`TRACES` (``scripts/build_plotly_bundle.sh``: npm's ``plotly.js`` package and esbuild; 2.2 MB) into the
environment (:data:`BUNDLE`), and the app serves it at :data:`ROUTE` and puts it in its page ahead of Dash's own
scripts (:func:`page_scripts`), where the graphs find it.

Where the build is missing, or its opening line (:func:`banner`) names another version or other traces (the
``plotly`` package upgraded since set-up, or :data:`TRACES` changed), the page goes without it (logged) and the graphs
load the full plotly.js, as they did before.
"""

from __future__ import annotations

import logging
import sys
from functools import lru_cache
from pathlib import Path

import flask
from plotly.offline import get_plotlyjs_version

logger = logging.getLogger(__name__)

#: every trace type a figure of the app draws (``scatter`` is in every plotly.js build); the build holds these
TRACES = ("bar", "box", "heatmap", "histogram2d", "image", "scatter", "scatter3d", "scattergl")
#: where ``scripts/setup.sh`` builds it, named by the plotly.js version of the installed ``plotly`` package
BUNDLE = Path(sys.prefix) / "share" / "qkviz" / f"plotly-qkviz-{get_plotlyjs_version()}.min.js"
#: where the app serves it (under the app's root path)
ROUTE = "/_qkviz/plotly.min.js"
#: how long a browser may keep it (its address names its build's modification time)
MAX_AGE_S = 365 * 24 * 3600


def banner(version: str | None = None, traces: tuple[str, ...] = TRACES) -> str:
    """The build's opening line: what it is (the plotly.js version, the traces) and how it was made (the build script
    puts plotly.js's own license after it)."""
    return (f"/*! qkviz's build of plotly.js v{version or get_plotlyjs_version()}, traces: {', '.join(traces)} "
            "(scripts/build_plotly_bundle.sh).\n")


@lru_cache(maxsize=4)
def usable_bundle(path: Path = BUNDLE) -> Path | None:
    """``path`` where it is the build of this plotly.js version with :data:`TRACES` (its opening line says so); else
    None, logged once: the page then loads the full plotly.js."""
    try:
        with open(path, encoding="utf-8") as handle:
            first = handle.readline()
    except (OSError, UnicodeDecodeError):
        logger.info("no plotly.js build of the app's traces at %s (scripts/setup.sh makes it): the app's graphs load "
                    "the full plotly.js", path)
        return None
    if first != banner():
        logger.warning("%s is not the build of plotly.js v%s with the app's traces (%s; run scripts/setup.sh again): "
                       "the app's graphs load the full plotly.js", path, get_plotlyjs_version(), first.strip()[:120])
        return None
    return path


def page_scripts(server: flask.Flask, root_path: str, path: Path = BUNDLE) -> list[dict]:
    """Serve the build at :data:`ROUTE` and give the page's ``external_scripts`` that load it (``root_path``: the
    prefix the page asks under, ``/`` or ``/user/x/proxy/8050/``); none where there is no usable build."""
    found = usable_bundle(path)
    if found is None:
        return []
    server.add_url_rule(ROUTE, "qkviz_plotly", lambda: flask.send_file(found, mimetype="text/javascript",
                                                                       max_age=MAX_AGE_S))
    return [{"src": f"{root_path.rstrip('/')}{ROUTE}?m={found.stat().st_mtime_ns}"}]
