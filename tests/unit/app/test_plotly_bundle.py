"""The app's own plotly.js build (dash_app.plotly_bundle): it holds every trace type a figure of the app draws, the
page loads it only where it is the build of the installed plotly.js version with those traces, and the app serves it
under its root path."""

import re

import flask
import plotly.graph_objects as go
from plotly.basedatatypes import BaseTraceType
from plotly.offline import get_plotlyjs_version
from support import REPO

from dash_app.plotly_bundle import BUNDLE, ROUTE, TRACES, banner, page_scripts, usable_bundle

#: a class of plotly.graph_objects named in the app's code (go.Scattergl(...)), and a type given by name in a dict
#: (dict(type="image", ...), {"type": "image"}): the names that are trace types are the app's traces
CLASS_NAME = re.compile(r"\bgo\.([A-Z][A-Za-z0-9]*)\(")
TYPE_NAME = re.compile(r"""["']?\btype["']?\s*[=:]\s*["']([a-z0-9]+)["']""")


def test_the_build_holds_every_trace_type_the_apps_figures_draw():
    classes = {name: getattr(go, name) for name in dir(go) if name[:1].isupper()}
    trace_types = {name.lower() for name, value in classes.items()
                   if isinstance(value, type) and issubclass(value, BaseTraceType)}
    named = set()
    for path in (REPO / "dash_app").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        named |= {name.lower() for name in CLASS_NAME.findall(text)} | set(TYPE_NAME.findall(text))
    used = named & trace_types
    assert {"scattergl", "heatmap", "scatter3d", "image"} <= used           # the scan finds the app's traces
    assert used <= set(TRACES), sorted(used - set(TRACES))


def test_only_the_build_of_this_plotly_js_with_the_apps_traces_is_loaded(tmp_path):
    right = tmp_path / "right.min.js"
    right.write_text(banner() + "var Plotly={};\n", encoding="utf-8")
    older = tmp_path / "older.min.js"
    older.write_text(banner(version="3.0.0") + "var Plotly={};\n", encoding="utf-8")
    fewer = tmp_path / "fewer.min.js"
    fewer.write_text(banner(traces=TRACES[:-1]) + "var Plotly={};\n", encoding="utf-8")
    assert usable_bundle(right) == right
    assert usable_bundle(older) is None and usable_bundle(fewer) is None
    assert usable_bundle(tmp_path / "missing.min.js") is None
    assert f"plotly.js v{get_plotlyjs_version()}" in banner() and BUNDLE.name.endswith(f"{get_plotlyjs_version()}.min.js")

    server = flask.Flask(__name__)
    assert page_scripts(flask.Flask(__name__), "/", older) == []          # the page loads plotly's own
    (script,) = page_scripts(server, "/user/x/proxy/8050/", right)
    assert script["src"].startswith(f"/user/x/proxy/8050{ROUTE}?m=")
    answer = server.test_client().get(ROUTE)
    assert answer.status_code == 200 and answer.mimetype == "text/javascript"
    assert answer.get_data(as_text=True) == right.read_text(encoding="utf-8")
    answer.close()
